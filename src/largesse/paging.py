"""`total_count` at scale: counts that stop COUNT_HORIZON rows past the requested offset.

Every list of the API answers `total_count` (the official client types it an integer). An
exact count walks every match: 10-15 ms for 100,000 orders on PostgreSQL, growing with the
table. These count a window instead (docs/api.md, "total_count at scale"), so a page costs
the same at 10,000 or 1,000,000 rows.
"""

from __future__ import annotations

from sqlalchemy import Connection, Integer, bindparam, func, select

from largesse import db

# How far past the requested offset total_count counts matches (docs/api.md, "total_count at scale").
COUNT_HORIZON = 1_000


def count_statements(matching) -> tuple:
    """bounded_count's statements for `matching`, a select of the matches' IDs whose values are
    bound parameters: (the count of the window past the offset, the count capped at the offset).
    Built once per kind of list: built per request, they cost more CPU than the count itself."""
    window = (matching.offset(bindparam("count_offset", type_=Integer))
              .limit(bindparam("count_window", type_=Integer)).subquery())
    capped = matching.limit(bindparam("count_limit", type_=Integer)).subquery()
    return select(func.count()).select_from(window), select(func.count()).select_from(capped)


def bounded_count(conn: Connection, counts: tuple, offset: int, params: dict, seen: int | None = None) -> int:
    """total_count of a page at `offset`, at a cost bounded by COUNT_HORIZON, not by the matches.

    Exact when the matches end within COUNT_HORIZON rows past `offset` (every list of up to
    offset + COUNT_HORIZON matches, so every small list, gets its exact count). Otherwise a
    lower bound, offset + COUNT_HORIZON + 1: more than the page holds, so a client that pages
    until offset >= total_count reaches the end, and it grows as the client pages on. Counting
    stops at the horizon instead of walking every match (10 % of a million rewards for a
    common label), which kept a page's cost flat with the table's size.

    `counts` comes from count_statements(matching), `params` binds matching's parameters (and
    count_params(offset)'s); `seen`, the window's count when the caller's page statement
    carried it already.
    """
    window, capped = counts
    if seen is None:
        seen = conn.execute(window, params).scalar_one()
    if seen == 0 and offset:
        # Past the end: the exact total is below offset; one count, bounded by offset itself.
        return conn.execute(capped, {**params, "count_limit": offset}).scalar_one()
    return offset + seen


def count_params(offset: int) -> dict:
    return {"count_offset": offset, "count_window": COUNT_HORIZON + 1}


def page_total(conn: Connection, counts: tuple, params: dict, *, offset: int, limit: int, page_len: int) -> int:
    """bounded_count of a page of `page_len` rows out of `limit` already read: a page that is
    not full ends the list, so it needs no count (but a page past the end, whose total is
    below the offset)."""
    if page_len < limit:
        return offset + page_len if page_len or not offset else bounded_count(conn, counts, offset, params, seen=0)
    return bounded_count(conn, counts, offset, params)


class Listing:
    """A paged list of `table`'s rows in `order_by`, matching `where` and whichever of the
    optional `filters` a request gives (conditions on bound parameters named as the filters),
    with the bounded total_count. Its statements are built once per set of filters given. A
    page is a walk of an index in the list's order that stops after offset + limit rows, so it
    runs under db.index_walks (PostgreSQL without statistics would sort every match instead).

    `key`: the column naming a row (default `table.c.id`). `joined`: for a list whose rows come
    with other tables' columns, a select of those columns and joins without WHERE or ORDER BY;
    the page walks `table` alone for the page's keys, then joins only those rows (a join per
    match, before the limit, is what the planners otherwise choose). `count_in_order`: count
    the window in the list's order, walking on from the page, where a filter costs a lookup per
    row (in another index's order the count could examine far more rows than the window)."""

    def __init__(self, table, where, filters: dict, order_by: tuple, *, key=None, joined=None,
                 count_in_order: bool = False):
        self.table, self.where, self.filters, self.order_by = table, where, filters, order_by
        self.key = table.c.id if key is None else key
        self.joined, self.count_in_order = joined, count_in_order
        self._built: dict[tuple[str, ...], tuple] = {}

    def page(self, conn: Connection, params: dict, *, offset: int, limit: int) -> tuple[list, int]:
        """(rows at offset, at most limit of them; total_count); `params` binds `where` and the
        filters, a filter whose value is None being left out."""
        db.index_walks(conn)
        counts, statement = self._statements(params)
        params = {**params, "offset": offset, "limit": limit, **count_params(offset)}
        rows = conn.execute(statement, params).all()
        return rows, page_total(conn, counts, params, offset=offset, limit=limit, page_len=len(rows))

    def rows(self, conn: Connection, params: dict, *, offset: int, limit: int) -> list:
        """The page alone, for a list that answers no total_count."""
        db.index_walks(conn)
        _, statement = self._statements(params)
        return conn.execute(statement, {**params, "offset": offset, "limit": limit}).all()

    def _statements(self, params: dict) -> tuple:
        given = tuple(name for name in self.filters if params.get(name) is not None)
        return self._built.get(given) or self._build(given)

    def _build(self, given: tuple[str, ...]) -> tuple:
        where = [self.where, *(self.filters[name] for name in given)]
        window = (bindparam("offset", type_=Integer), bindparam("limit", type_=Integer))
        if self.joined is None:
            statement = select(self.table).where(*where).order_by(*self.order_by).offset(window[0]).limit(window[1])
        else:
            keys = (select(self.key).where(*where).order_by(*self.order_by).offset(window[0]).limit(window[1])
                    .correlate(None))
            statement = self.joined.where(self.key.in_(keys)).order_by(*self.order_by)
        matching = select(self.key).where(*where)
        if self.count_in_order:
            matching = matching.order_by(*self.order_by)
        built = self._built[given] = (count_statements(matching), statement)
        return built
