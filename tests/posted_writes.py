#!/usr/bin/env python3
"""Buffered and posted writes (src/ipc/HOT_PATH.md) seen by other sessions
and by their own.

A new row of a pasv table stays in its backend's write-behind buffer until
the backend's next engine request or commit, with its index entries already
inserted; it is then posted: the backend goes on before the engine has
applied it. `pasv.test_delay_next_write(us)` makes the engine hold the next
write for `us` microseconds, so the window in which a row is logged, its
index entry inserted, and the row itself not yet in the engine becomes wide
enough to test deterministically. Each race runs twice: with the writer's
row still buffered (another session learns of it from the buffer's
publication, `ipc/buffered_rows.rs`), posted but held in the engine (the
writer's insert into a second table sends it; the other session fences), and
posted behind another held write of the writer, in the other slot of its
pair (`ipc/mod.rs`; the fence must wait for a queued write too):

1. read-your-writes: a session reads its own delayed row at once;
2. a unique check in another session that meets the row's index entry must
   wait for the writer and fail with unique_violation once the writer
   commits, never insert a duplicate;
3. the same with the writer rolling back: the other insert succeeds;
4. INSERT ... ON CONFLICT DO NOTHING in another session does nothing;
5. a DELETE's posted tombstone: another session's insert of the deleted key
   waits for the deleter and succeeds after its commit;
6. an exclusion constraint on circles (a lossy GiST index: the check
   re-reads the existing row's values): an overlapping insert waits and
   fails with exclusion_violation (the writer's own check sends its row,
   so this is the posted path whatever the table's write policy);
7. an expression index whose expression fails on NULL: ON CONFLICT in
   another session evaluates it on the existing row, which must be the
   real row (tables with such indexes write new rows through).

Usage: posted_writes.py --host H --port P   (exit 0 iff every check held)
"""
import argparse
import sys
import threading
import time

import psycopg
from psycopg import errors

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", required=True)
    args = ap.parse_args()
    info = dict(host=args.host, port=args.port, user="postgres", dbname="postgres")

    def connect():
        return psycopg.connect(**info, autocommit=True, options="-c statement_timeout=30s -c lock_timeout=20s")

    setup = connect()
    setup.execute("CREATE EXTENSION IF NOT EXISTS pasv")
    setup.execute("DROP TABLE IF EXISTS pw")
    setup.execute("CREATE TABLE pw (k int PRIMARY KEY, v text) USING pasv")
    setup.execute("DROP TABLE IF EXISTS pw_side, pw_q, pwx, pwe")
    setup.execute("CREATE TABLE pw_side (k int) USING pasv")
    setup.execute("CREATE TABLE pw_q (k int PRIMARY KEY) USING pasv")
    setup.execute("CREATE TABLE pwx (c circle, EXCLUDE USING gist (c WITH &&)) USING pasv")
    setup.execute(
        "CREATE OR REPLACE FUNCTION pw_not_null(int) RETURNS int IMMUTABLE CALLED ON NULL INPUT LANGUAGE plpgsql"
        " AS $$ BEGIN IF $1 IS NULL THEN RAISE EXCEPTION 'pw_not_null(NULL)'; END IF; RETURN $1; END $$"
    )
    setup.execute("CREATE TABLE pwe (k int) USING pasv")
    setup.execute("CREATE UNIQUE INDEX pwe_k ON pwe (pw_not_null(k))")

    def other_insert(sql, outcome):
        """Run `sql` in a new session; record ('ok'|'unique'|error text, seconds)."""
        t0 = time.monotonic()
        with connect() as c:
            try:
                c.execute(sql)
                outcome.append(("ok", time.monotonic() - t0))
            except errors.UniqueViolation:
                outcome.append(("unique", time.monotonic() - t0))
            except errors.ExclusionViolation:
                outcome.append(("exclusion", time.monotonic() - t0))
            except Exception as e:  # noqa: BLE001 - reported as a failure
                outcome.append((repr(e), time.monotonic() - t0))

    def race(key, finish, other_sql, posted, insert="INSERT INTO pw VALUES (%s, 'writer')"):
        """Writer inserts `key` with its write held back (`posted`: sent,
        else still buffered; "queued": sent behind another held write, and
        held itself), another session runs `other_sql`; the writer then
        ends with `finish`."""
        writer = connect()
        if posted == "queued":
            # Rowids reserved first: a reservation is a request that would
            # wait for the held write.
            writer.execute("BEGIN")
            writer.execute("INSERT INTO pw_side VALUES (0)")
            writer.execute("INSERT INTO pw VALUES (%s, 'reserve')", (-key,))
            writer.execute("INSERT INTO pw_q VALUES (%s)", (-key,))
            writer.execute("ROLLBACK")
        writer.execute("BEGIN")
        writer.execute("SELECT pasv.test_delay_next_write(400000)")
        if posted == "queued":
            # pw_side's row goes first (the insert into pw, another table,
            # sends it) and is held; the insert into pw_q, another indexed
            # table, sends the writer's row behind it, in the other slot of
            # the writer's pair (src/ipc/mod.rs), where it is held longer.
            writer.execute("INSERT INTO pw_side VALUES (1)")
            writer.execute(insert, (key,))
            writer.execute("SELECT pasv.test_delay_next_write(1500000)")
            writer.execute("INSERT INTO pw_q VALUES (%s)", (key,))
        else:
            writer.execute(insert, (key,))
        if posted is True:
            writer.execute("INSERT INTO pw_side VALUES (1)")
        outcome = []
        t = threading.Thread(target=other_insert, args=(other_sql, outcome))
        t.start()
        time.sleep(1.0)  # well past the delayed write: the other session now waits on the writer
        still_waiting = t.is_alive()
        writer.execute(finish)
        t.join(25)
        writer.close()
        return still_waiting, outcome[0] if outcome else ("no answer", 0.0)

    # 1. read-your-writes
    with connect() as c:
        c.execute("BEGIN")
        c.execute("SELECT pasv.test_delay_next_write(300000)")
        c.execute("INSERT INTO pw VALUES (1, 'mine')")
        row = c.execute("SELECT v FROM pw WHERE k = 1").fetchone()
        check(row == ("mine",), "a session reads its own posted row at once")
        c.execute("COMMIT")

    for posted, base in ((False, 10), (True, 20), ("queued", 30)):
        kind = {False: "buffered", True: "posted", "queued": "queued"}[posted]
        # 2. unique check against the insert, writer commits
        waiting, (res, _) = race(base, "COMMIT", f"INSERT INTO pw VALUES ({base}, 'other')", posted)
        check(waiting, f"another session's unique check waits for the writer of a {kind} row")
        check(res == "unique", f"... and fails with unique_violation after the writer commits (got {res})")

        # 3. writer rolls back
        waiting, (res, _) = race(base + 1, "ROLLBACK", f"INSERT INTO pw VALUES ({base + 1}, 'other')", posted)
        check(waiting, f"a unique check waits for the writer of a {kind} row that will roll back")
        check(res == "ok", f"... and inserts after the rollback (got {res})")

        # 4. ON CONFLICT DO NOTHING
        waiting, (res, _) = race(base + 2, "COMMIT", f"INSERT INTO pw VALUES ({base + 2}, 'other') ON CONFLICT DO NOTHING", posted)
        check(waiting, f"ON CONFLICT DO NOTHING waits for the writer of a {kind} row")
        check(res == "ok", f"... and completes (got {res})")

    # 6. exclusion constraint
    waiting, (res, _) = race(1, "COMMIT", "INSERT INTO pwx VALUES ('<(3,0),5>')", False,
                             insert="INSERT INTO pwx VALUES (circle(point(%s, 0), 5))")
    check(waiting, "an overlapping insert waits for the writer of a row under an exclusion constraint")
    check(res == "exclusion", f"... and fails with exclusion_violation after the writer commits (got {res})")

    # 7. expression index evaluated on the existing row
    waiting, (res, _) = race(5, "COMMIT", "INSERT INTO pwe VALUES (5) ON CONFLICT DO NOTHING", False,
                             insert="INSERT INTO pwe VALUES (%s)")
    check(waiting, "ON CONFLICT through an expression index waits for the writer")
    check(res == "ok", f"... and completes without evaluating the expression on a row it cannot see (got {res})")

    # 5. posted tombstone
    with connect() as deleter:
        deleter.execute("BEGIN")
        deleter.execute("SELECT pasv.test_delay_next_write(400000)")
        deleter.execute("DELETE FROM pw WHERE k = 1")
        outcome = []
        t = threading.Thread(target=other_insert, args=("INSERT INTO pw VALUES (1, 'again')", outcome))
        t.start()
        time.sleep(1.0)
        check(t.is_alive(), "an insert of a key deleted by a running transaction waits")
        deleter.execute("COMMIT")
        t.join(25)
        check(outcome and outcome[0][0] == "ok", f"... and succeeds after the delete commits (got {outcome})")

    rows = setup.execute("SELECT k, v FROM pw ORDER BY k").fetchall()
    expected = [(1, "again")] + [(b + i, w) for b in (10, 20, 30) for i, w in enumerate(("writer", "other", "writer"))]
    check(rows == expected, f"final rows {rows}")
    dup = setup.execute("SELECT count(*) FROM (SELECT k FROM pw GROUP BY k HAVING count(*) > 1) d").fetchone()[0]
    check(dup == 0, "no duplicate keys")
    n = setup.execute("SELECT count(*) FROM pwx").fetchone()[0]
    check(n == 1, f"one circle under the exclusion constraint (got {n})")
    n = setup.execute("SELECT count(*) FROM pwe").fetchone()[0]
    check(n == 1, f"one row under the expression index (got {n})")
    setup.execute("DROP TABLE pw, pw_side, pw_q, pwx, pwe")
    setup.execute("DROP FUNCTION pw_not_null(int)")
    setup.close()
    print(f"{'FAILED' if FAILURES else 'passed'}: {len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
