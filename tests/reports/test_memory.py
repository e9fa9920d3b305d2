"""Report generation runs in bounded memory: the peak does not grow with the row count.

Seeds fresh SQLite databases (not the session's: their bulk-inserted orders have no ledger
debit) through bench/report_memory.py and measures write_csv under tracemalloc. The figures
for 50,000 and 100,000 rewards are in docs/reports.md (python -m bench.report_memory).
"""

from __future__ import annotations

from bench.report_memory import measure, seeded_database

from largesse.reports import generate

MIB = 2**20


def test_peak_memory_does_not_grow_with_the_report():
    small = measure(*seeded_database(generate.PAGE * 2))
    large = measure(*seeded_database(generate.PAGE * 8))
    assert (small["rows"], large["rows"]) == (generate.PAGE * 2, generate.PAGE * 8)
    assert large["bytes"] > 3.5 * small["bytes"]  # four times the CSV...
    assert large["peak_bytes"] < small["peak_bytes"] + 1 * MIB  # ...in the same memory
    assert large["peak_bytes"] < 8 * MIB
