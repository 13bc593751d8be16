"""The `memory-sdk demo` conversation and the record/replay providers that let it run offline.

>>> from memory_sdk.demo import CONVERSATION, ReplayLLM, bundled_recording
>>> llm = ReplayLLM(bundled_recording())   # answers recorded from a real model, no network needed
"""

from memory_sdk.demo.conversation import CONVERSATION, DEMO_SPEAKER, DemoMessage
from memory_sdk.demo.replay import (
    RECORDING_FORMAT,
    RecordedCall,
    Recording,
    RecordingLLM,
    ReplayExhausted,
    ReplayLLM,
    bundled_recording,
    load_recording,
)

__all__ = [
    "CONVERSATION",
    "DEMO_SPEAKER",
    "RECORDING_FORMAT",
    "DemoMessage",
    "RecordedCall",
    "Recording",
    "RecordingLLM",
    "ReplayExhausted",
    "ReplayLLM",
    "bundled_recording",
    "load_recording",
]
