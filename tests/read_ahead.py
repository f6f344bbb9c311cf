#!/usr/bin/env python3
"""Scan read-ahead (src/ipc/HOT_PATH.md §15) against heap, with writes between batches.

A sequential scan of a pasv table asks the engine for its next batch before
it works through the current one, through a second channel slot, so the
batch it uses may be read before, or beside, the backend's own later
requests. That is sound only for changes the scan's snapshot cannot see.
This test makes such changes happen between the batches of open cursors and
compares every cursor's rows with a heap twin's that went through the same
steps:

1. another session commits updates (hot rows, several versions each),
   deletes and inserts while the cursors are open;
2. the cursors' own transaction writes the table between fetches (later
   command ids), its writes running beside a read-ahead;
3. the cursors' own session runs index fetches between fetches;
4. two cursors over the same pasv table advance in turn, so each one's
   read-ahead displaces the other's;
5. a nested loop whose outer side is a sequential scan and whose inner side
   fetches by index;
6. the read-ahead was used (posted scans) and displaced at least once, so
   the checks above exercised it.

Rounds are seeded and bounded. Usage: read_ahead.py --host H --port P
[--rounds N] [--seed S]   (exit 0 iff every check held)
"""
import argparse
import random
import sys

import psycopg

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


ROWS = 20000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", required=True)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=20261124)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    info = dict(host=args.host, port=args.port, user="postgres", dbname="postgres")

    def connect(autocommit=True):
        return psycopg.connect(**info, autocommit=autocommit, options="-c statement_timeout=60s -c lock_timeout=30s")

    setup = connect()
    setup.execute("CREATE EXTENSION IF NOT EXISTS pasv")
    for name, am in (("ra_p", "pasv"), ("ra_h", "heap")):
        setup.execute(f"DROP TABLE IF EXISTS {name}")
        setup.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, k int, v text) USING {am}")
        # Values of varied length: batches end at varied rows.
        setup.execute(
            f"INSERT INTO {name} SELECT g, g % 977, repeat(chr(97 + g % 26), 10 + (g * 7919) % 190) "
            f"FROM generate_series(1, {ROWS}) g"
        )
    next_id = ROWS + 1

    other = connect()
    reader = connect(autocommit=False)
    reader.execute("SET enable_indexscan = off; SET enable_bitmapscan = off; SET max_parallel_workers_per_gather = 0")
    reader.commit()

    def both(conn, sql, params=()):
        """Run `sql` (with {t}) on the pasv table, then on its heap twin."""
        for t in ("ra_p", "ra_h"):
            conn.execute(sql.format(t=t), params)

    def random_write(conn, first, last):
        """A random write to ids in [first, last] (the two sessions write
        apart: the reader's row locks would block the other session) or to
        new ids."""
        nonlocal next_id
        op = rng.random()
        if op < 0.4:
            # Hot rows: a few ids updated again and again.
            ids = [rng.randint(first, first + 40) for _ in range(rng.randint(1, 5))]
            both(conn, "UPDATE {t} SET v = v || 'u' WHERE id = ANY(%s)", (ids,))
        elif op < 0.6:
            lo = rng.randint(first, last - 300)
            both(conn, "UPDATE {t} SET k = k + 1 WHERE id BETWEEN %s AND %s", (lo, lo + rng.randint(0, 300)))
        elif op < 0.8:
            lo = rng.randint(first, last - 50)
            both(conn, "DELETE FROM {t} WHERE id BETWEEN %s AND %s", (lo, lo + rng.randint(0, 50)))
        else:
            n = rng.randint(1, 200)
            both(conn, "INSERT INTO {t} SELECT g, g %% 977, 'new' || g FROM generate_series(%s::int, %s::int) g",
                 (next_id, next_id + n - 1))
            next_id += n

    for rnd in range(args.rounds):
        iso = rng.choice(["READ COMMITTED", "REPEATABLE READ"])
        reader.execute(f"BEGIN ISOLATION LEVEL {iso}")
        for cur, t in (("cp", "ra_p"), ("ch", "ra_h")):
            reader.execute(f"DECLARE {cur} NO SCROLL CURSOR FOR SELECT id, k, v FROM {t}")
            reader.execute(f"DECLARE {cur}2 NO SCROLL CURSOR FOR SELECT id, v FROM {t} WHERE k % 3 = 0")
        got = {c: [] for c in ("cp", "ch", "cp2", "ch2")}
        done = {c: False for c in got}
        steps = 0
        while not all(done.values()) and steps < 200:
            steps += 1
            n = rng.choice([1, 7, 100, 1500, 4000])
            for cur in got:
                if not done[cur]:
                    rows = reader.execute(f"FETCH {n} FROM {cur}").fetchall()
                    got[cur].extend(rows)
                    done[cur] = len(rows) < n
            what = rng.random()
            if what < 0.4:
                random_write(other, 1, ROWS // 2)
            elif what < 0.6:
                random_write(reader, ROWS // 2 + 1, ROWS)
            elif what < 0.8:
                # Index fetches from the cursor's own session between
                # batches: they displace the read-ahead in flight.
                ids = [rng.randint(1, ROWS) for _ in range(5)]
                a = reader.execute("SELECT id, v FROM ra_p WHERE id = ANY(%s) ORDER BY id", (ids,)).fetchall()
                b = reader.execute("SELECT id, v FROM ra_h WHERE id = ANY(%s) ORDER BY id", (ids,)).fetchall()
                if a != b:
                    check(False, f"round {rnd}: index fetches between batches differ: {a} vs {b}")
        check(all(done.values()), f"round {rnd} ({iso}): every cursor ran to its end within 200 fetches")
        for p, h in (("cp", "ch"), ("cp2", "ch2")):
            same = sorted(got[p]) == sorted(got[h])
            check(same, f"round {rnd} ({iso}): pasv cursor {p} returned heap cursor {h}'s rows "
                        f"({len(got[p])} / {len(got[h])} rows)")
            if not same:
                a, b = set(got[p]), set(got[h])
                print("  only pasv:", sorted(a - b)[:5], " only heap:", sorted(b - a)[:5])
        if rng.random() < 0.5:
            reader.commit()
        else:
            reader.rollback()

    # A nested loop: the outer sequential scan's read-ahead is displaced by
    # the inner index fetches, batch after batch.
    reader.execute("SET enable_indexscan = on; SET enable_hashjoin = off; SET enable_mergejoin = off")
    reader.execute("SET enable_material = off")
    q = "SELECT count(*), sum(length(b.v)), sum(length(a.v)) FROM {t} a JOIN {t} b ON b.id = a.k"
    plan = "\n".join(r[0] for r in reader.execute("EXPLAIN " + q.format(t="ra_p")).fetchall())
    check("Nested Loop" in plan and "Seq Scan on ra_p a" in plan and "Index Scan" in plan,
          "the join is a nested loop over a sequential scan with index fetches inside")
    a = reader.execute(q.format(t="ra_p")).fetchone()
    b = reader.execute(q.format(t="ra_h")).fetchone()
    check(a == b, f"nested loop over pasv equals heap's: {a} vs {b}")
    reader.commit()

    # The read-ahead was used, and displaced: the checks above went through it.
    fresh = connect()
    fresh.execute("SET max_parallel_workers_per_gather = 0")
    a = fresh.execute("SELECT count(*), sum(k), sum(length(v)) FROM ra_p").fetchone()
    b = fresh.execute("SELECT count(*), sum(k), sum(length(v)) FROM ra_h").fetchone()
    check(a == b, f"a full scan of pasv equals heap's: {a} vs {b}")
    posted = fresh.execute("SELECT coalesce(sum(posted), 0) FROM pasv.channel_stats('backend') "
                           "WHERE request = 'scan'").fetchone()[0]
    check(posted > 0, f"the full scan read ahead ({posted} posted scans)")
    displaced = fresh.execute("SELECT value FROM pasv.engine_stats() WHERE counter = 'read_aheads_discarded'").fetchone()
    check(displaced is not None and displaced[0] > 0, f"read-aheads were displaced and discarded ({displaced})")

    for c in (fresh, reader, other, setup):
        c.close()
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
