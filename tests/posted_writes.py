#!/usr/bin/env python3
"""Posted writes (src/ipc/HOT_PATH.md) seen by other sessions and by their own.

A write to a pasv table is posted: the backend goes on before the engine has
applied it. `pasv.test_delay_next_write(us)` makes the engine hold the next
write for `us` microseconds, so the window in which a row is logged, its index
entry inserted, and the row itself not yet in the engine becomes wide enough
to test deterministically:

1. read-your-writes: a session reads its own delayed row at once;
2. a unique check in another session that meets the delayed row's index
   entry must wait for the writer (fence, then an in-progress insert) and
   fail with unique_violation once the writer commits, never insert a
   duplicate;
3. the same with the writer rolling back: the other insert succeeds;
4. INSERT ... ON CONFLICT DO NOTHING in another session does nothing;
5. a DELETE's posted tombstone: another session's insert of the deleted key
   waits for the deleter and succeeds after its commit.

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

    def other_insert(sql, outcome):
        """Run `sql` in a new session; record ('ok'|'unique'|error text, seconds)."""
        t0 = time.monotonic()
        with connect() as c:
            try:
                c.execute(sql)
                outcome.append(("ok", time.monotonic() - t0))
            except errors.UniqueViolation:
                outcome.append(("unique", time.monotonic() - t0))
            except Exception as e:  # noqa: BLE001 - reported as a failure
                outcome.append((repr(e), time.monotonic() - t0))

    def race(key, finish, other_sql):
        """Writer inserts `key` with its write held back, another session
        runs `other_sql`; the writer then ends with `finish`."""
        writer = connect()
        writer.execute("BEGIN")
        writer.execute("SELECT pasv.test_delay_next_write(400000)")
        writer.execute("INSERT INTO pw VALUES (%s, 'writer')", (key,))
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

    # 2. unique check against a posted insert, writer commits
    waiting, (res, _) = race(10, "COMMIT", "INSERT INTO pw VALUES (10, 'other')")
    check(waiting, "another session's unique check waits for the writer of a posted row")
    check(res == "unique", f"... and fails with unique_violation after the writer commits (got {res})")

    # 3. writer rolls back
    waiting, (res, _) = race(11, "ROLLBACK", "INSERT INTO pw VALUES (11, 'other')")
    check(waiting, "a unique check waits for the writer that will roll back")
    check(res == "ok", f"... and inserts after the rollback (got {res})")

    # 4. ON CONFLICT DO NOTHING
    waiting, (res, _) = race(12, "COMMIT", "INSERT INTO pw VALUES (12, 'other') ON CONFLICT DO NOTHING")
    check(res == "ok", f"ON CONFLICT DO NOTHING against a posted row completes (got {res})")

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
    check(rows == [(1, "again"), (10, "writer"), (11, "other"), (12, "writer")], f"final rows {rows}")
    dup = setup.execute("SELECT count(*) FROM (SELECT k FROM pw GROUP BY k HAVING count(*) > 1) d").fetchone()[0]
    check(dup == 0, "no duplicate keys")
    setup.execute("DROP TABLE pw")
    setup.close()
    print(f"{'FAILED' if FAILURES else 'passed'}: {len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
