#!/usr/bin/env python3
"""Seeded differential crash tester for pasv (DESIGN.md §9, invariant 8).

Every logical table X exists twice with the same schema and indexes: X_p
USING pasv and X_h USING heap. Client threads run random transactions in
which every logical operation is applied to X_p and then to X_h, with the
same statement text and inside the same transaction, so the twins commit or
abort together. Heap is crash-safe through PostgreSQL's WAL, so after any
crash and recovery X_p must hold exactly the rows X_h holds; any difference
is a pasv bug.

The pairs: t1..t5, (k int PRIMARY KEY, u int UNIQUE, v int, t text) with an
index on v (t4's u is UNIQUE DEFERRABLE INITIALLY IMMEDIATE; t5's twins are
UNLOGGED, so a crash empties both and a clean stop keeps both), and t6 with
the same columns and no index at all (the clients set
pasv.move_unindexed_updates, so an updated row moves to a new rowid there,
as heap's goes after the others; no ON CONFLICT or CLUSTER on it),
150 rows each at the start (packed by the engine in the pasv twins); k and u in 0..299 so that transactions conflict; t sometimes
3-22 kB (TOAST). Each client also creates and drops its own pair x<client>.
The transactions mix single and multi-row INSERT, UPDATE of indexed and
non-indexed columns, DELETE, INSERT ... ON CONFLICT DO UPDATE / DO NOTHING,
SELECT ... FOR UPDATE/SHARE, RETURNING, savepoints (RELEASE, ROLLBACK TO,
errors rolled back to them), PL/pgSQL blocks whose EXCEPTION clause rolls
their writes back, deliberate errors, ROLLBACK, TRUNCATE, CREATE/DROP of a
pair (committed or rolled back, with TRUNCATE in the creating transaction),
ALTER TABLE ADD/DROP COLUMN and ALTER COLUMN TYPE, CLUSTER, VACUUM (FULL,
FREEZE), ANALYZE, SET CONSTRAINTS ALL DEFERRED and synchronous_commit = off.

Why the twins stay equal without crashes: a transaction runs in REPEATABLE
READ or SERIALIZABLE (both statements of a pair see one snapshot), or in READ
COMMITTED after LOCK TABLE ... IN EXCLUSIVE MODE on every pair it touches;
transactions with INSERT ... ON CONFLICT take those locks at every isolation
level, because ON CONFLICT decides on the latest committed rows, not the
snapshot.
The pasv statement always runs first, so a concurrent writer is serialized on
the pasv twin (row locks, unique checks waiting for in-progress inserts)
before it reaches the heap twin. Statements are deterministic: no LIMIT
without a total order, multi-row UPDATEs of a unique column only where the
constraint is checked at the end of the statement (the DEFERRABLE pair).

Checked online, during the load (each a finding):
  * the two statements of a pair return different rows or row counts;
  * the heap statement fails (other than deadlock, serialization failure,
    lock or statement timeout) where the pasv statement succeeded;
  * before a crash is injected, the pasv statement fails with an error heap
    cannot raise for our workload (internal errors, feature not supported,
    ...);
  * the pasv statement fails with a unique violation (or another error heap
    could raise too): the transaction's statements are then re-run in a
    "probe" transaction (rolled back), each side in its own savepoint; an
    outcome that differs between pasv and heap, and still does when the
    failing pasv statement is retried right after the heap one, is a finding
    (a failed statement locks nothing, so a concurrent DELETE may legitimately
    remove the row it collided with before the heap statement runs);
  * a connection is lost although no crash was injected (a pasv crash), and
    in the server log: processes terminated by a signal we did not send,
    PANIC and TRAP lines, failed pasv recoveries. A pair named by a statement
    that crashed a backend is quarantined (its transactions are skipped for
    the rest of the run), so one crash bug does not hide all the others.

Crashes (one per cycle; the kind comes from the seed): pg_ctl stop -m
immediate; kill -9 of the pasv engine worker, of a client backend, of the
postmaster (then pg_ctl start); a second crash while pasv recovers
(recovering = true in pasv.database_status), a fast shutdown while it
recovers, the file crash point $PGDATA/pasv_crash_point
(replay_after_messages=N); and, when pasv.crash_point(text, integer) exists,
the named crash points (the (skip+1)-th process to reach one aborts).

After every recovery (bounded: 120 s) every pair is checked: rows of X_h not
in X_p (lost) and of X_p not in X_h (phantom), compared as multisets with
EXCEPT ALL; an index scan and a sequential scan of X_p over each index give
the same rows (mismatched); pasv.verify(X_p), when it exists, reports
nothing. A pair found different is reported (first rows shown) and then
re-synchronised (X_p := X_h) so later cycles test afresh.

Reproducibility: client C of seed S draws its transactions from
random.Random(S * 1000 + C), the crash schedule (kinds, delays, crash point
skips) from random.Random(S * 1000). Re-running with --seed S gives every
client the same sequence of transactions and the same crash kinds; how many
transactions run before each crash, and so the database state a crash hits,
depends on timing and varies between runs. Every executed statement and its
outcome is written to the statement log (its path is printed at the end of a
failed run, or of any run given --workdir).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import psycopg

DB = "diffcrash"
BASE_PAIRS = ("t1", "t2", "t3", "t4", "t5", "t6")
INDEXED_PAIRS = ("t1", "t2", "t3", "t4", "t5")
NOINDEX_PAIR = "t6"  # no index: no ON CONFLICT, no CLUSTER
DEFERRABLE_PAIR = "t4"  # its u is UNIQUE DEFERRABLE INITIALLY IMMEDIATE
# PostgreSQL's BUG #17731 (reported against 15.1, still in 16.2): when an
# unlogged relation's main fork is on disk at a crash but its init fork is not,
# and redo creates the init fork, the end-of-recovery reset finds the main fork
# in its way and the startup process fails with this FATAL; the next start
# succeeds (both forks exist then). The unlogged pair's btree indexes are
# PostgreSQL's own and meet it as heap's do, so the server is started once
# more, and the report says so.
CORE_BUG_17731 = re.compile(r'FATAL:  could not create file "[^"]+": File exists')
UNLOGGED_PAIR = "t5"  # both twins UNLOGGED: a crash empties both, a clean stop keeps both
CLIENTS = 4
KEYS = 300  # k, u in 0..299: small, so transactions conflict
SHORT_SEEDS = (1, 2, 3)
SHORT_CYCLES_PER_SEED = 3
LONG_CYCLES_PER_SEED = 20
RECOVERY_TIMEOUT = 120
# pasv.move_unindexed_updates: the pair without indexes (t6) moves its rows on UPDATE.
CLIENT_OPTIONS = "-c statement_timeout=30s -c lock_timeout=10s -c deadlock_timeout=100ms -c pasv.move_unindexed_updates=on"

# Errors a correct engine raises under concurrency: roll back and go on.
TRANSIENT = {"40001", "40P01", "55P03", "57014"}
# Errors of a pasv statement that heap may raise as well: checked by a probe.
PROBED = {"23505", "23502", "23514", "21000", "55006"}
# The extra pair of a client may not exist: an error both twins raise.
UNDEFINED_TABLE = "42P01"

TIME_KINDS = ("immediate", "kill-engine", "kill-backend", "kill-postmaster",
              "recovery-kill", "recovery-fast-stop", "recovery-file-point")
CRASH_POINTS = ("after_log_before_write", "after_write_before_commit", "after_commit_before_flag",
                "flag_flush", "flush_begin_wal", "replay_midway", "create_table", "truncate",
                "drop_table", "vacuum_between_passes", "vacuum_repacked", "slot_advance")
# Run by the scheduler when the load has not reached an armed crash point
# within 6 s: creates, truncates, vacuums and drops a pasv table that is no
# pair, and flushes the memtables.
SCRATCH_SQL = ("DROP TABLE IF EXISTS dc_scratch",
               "CREATE TABLE dc_scratch (k int PRIMARY KEY, v int) USING pasv",
               "INSERT INTO dc_scratch SELECT g, g FROM generate_series(1, 200) g",
               "DELETE FROM dc_scratch WHERE k % 2 = 0",
               "TRUNCATE dc_scratch",
               "INSERT INTO dc_scratch SELECT g, g FROM generate_series(1, 200) g",
               "DELETE FROM dc_scratch WHERE k % 3 = 0",
               "VACUUM dc_scratch",
               "SELECT pasv.flush()")


class ConnectionLost(Exception):
    """The server closed our connection (a crash, injected or not)."""


class StepFailed(Exception):
    """A statement of the transaction failed; the transaction must roll back."""

    def __init__(self, sqlstate: str | None, message: str):
        super().__init__(message)
        self.sqlstate = sqlstate


class Fatal(Exception):
    """The harness cannot go on (server gone, client stuck)."""


def pair_tables(pair: str) -> tuple[str, str]:
    return f"{pair}_p", f"{pair}_h"


def table_ddl(table: str, am: str, deferrable: bool, unlogged: bool = False, indexed: bool = True) -> list[str]:
    uniq = "UNIQUE DEFERRABLE INITIALLY IMMEDIATE" if deferrable else "UNIQUE"
    kind = "UNLOGGED TABLE" if unlogged else "TABLE"
    if not indexed:
        return [f"CREATE {kind} {table} (k int, u int, v int, t text) USING {am}"]
    return [f"CREATE {kind} {table} (k int PRIMARY KEY, u int {uniq}, v int, t text) USING {am}",
            f"CREATE INDEX {table}_v ON {table} (v)"]


def short(text: str, n: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n] + "..."


def lost_connection(e: psycopg.Error, conn: psycopg.Connection) -> bool:
    state = e.sqlstate or ""
    return conn.broken or conn.closed or state.startswith("08") or state in ("57P01", "57P02", "57P03") \
        or (isinstance(e, psycopg.OperationalError) and not state)


# ---- the workload -----------------------------------------------------------

@dataclass
class Pair:
    """One statement, run on X_p and then on X_h ({T} is the table, {AM} its access method)."""
    tpl: str
    pair: str

    def sql(self, side: str) -> str:
        table = f"{self.pair}_{side}"
        return self.tpl.replace("{T}", table).replace("{AM}", "pasv" if side == "p" else "heap")


@dataclass
class Plain:
    """One statement, run once (pairs: those it names, e.g. in a DO block)."""
    sql: str
    pairs: tuple = ()


@dataclass
class Savepoint:
    """SAVEPOINT name; steps; RELEASE or ROLLBACK TO. An error inside rolls back to it and the transaction goes on."""
    name: str
    steps: list
    release: bool


@dataclass
class Txn:
    n: int
    kind: str
    steps: list
    iso: str = "REPEATABLE READ"  # READ COMMITTED only with the touched pairs locked
    commit: bool = True
    autocommit: bool = False  # VACUUM: each statement on its own


def has_on_conflict(steps: list) -> bool:
    """Whether a step is an INSERT ... ON CONFLICT (its arbitration reads the latest rows, not the snapshot)."""
    for s in steps:
        if isinstance(s, Pair) and "ON CONFLICT" in s.tpl:
            return True
        if isinstance(s, Plain) and "ON CONFLICT" in s.sql:
            return True
        if isinstance(s, Savepoint) and has_on_conflict(s.steps):
            return True
    return False


def txn_pairs(steps: list) -> set[str]:
    out = set()
    for s in steps:
        if isinstance(s, Pair):
            out.add(s.pair)
        elif isinstance(s, Plain):
            out |= set(s.pairs)
        elif isinstance(s, Savepoint):
            out |= txn_pairs(s.steps)
    return out


class Workload:
    """One client's deterministic stream of transactions, from random.Random(seed * 1000 + client)."""

    KINDS = (("dml", 50), ("savepoint", 12), ("do_block", 7), ("error", 4), ("truncate", 3),
             ("alter", 3), ("cluster", 2), ("vacuum", 3), ("extra_create", 3), ("extra_drop", 2),
             ("extra_dml", 3))

    def __init__(self, seed: int, client: int):
        self.rng = random.Random(seed * 1000 + client)
        self.client = client
        self.extra = f"x{client}"  # this client's own extra pair
        self.n = 0

    # values
    def k(self) -> int:
        return self.rng.randrange(KEYS)

    def u(self) -> str:
        return "NULL" if self.rng.random() < 0.3 else str(self.rng.randrange(KEYS))

    def v(self) -> int:
        return self.rng.randrange(40)

    def t(self) -> str:
        r = self.rng.random()
        if r < 0.08:
            return "NULL"
        if r < 0.22:  # 3-22 kB of md5 hex: TOAST
            return f"dc_blob({self.rng.randrange(10 ** 6)}, {self.rng.randint(100, 700)})"
        return f"'c{self.client}-{self.rng.randrange(10 ** 5)}'"

    def row(self, k: int | None = None) -> str:
        return f"({self.k() if k is None else k}, {self.u()}, {self.v()}, {self.t()})"

    def rows(self, lo: int, hi: int) -> str:
        keys = self.rng.sample(range(KEYS), self.rng.randint(lo, hi))
        return ", ".join(self.row(k) for k in keys)

    def range_(self, width: int = 12) -> tuple[int, int]:
        a = self.k()
        return a, a + self.rng.randint(0, width)

    def pick(self, weighted):
        return self.rng.choices([w[0] for w in weighted], [w[1] for w in weighted])[0]

    # operations
    def op(self, pair: str, in_plpgsql: bool = False) -> Pair:
        """One DML operation on a pair (in_plpgsql: no result rows)."""
        deferrable = pair == DEFERRABLE_PAIR
        ops = [("insert1", 6), ("insert_multi", 3), ("insert_series", 4), ("update_t", 8),
               ("update_v", 8), ("update_u", 4), ("update_k", 3), ("delete", 7), ("upsert", 10),
               ("upsert_nothing", 8)]
        if not in_plpgsql:
            ops.append(("select", 6))
        indexed = pair != NOINDEX_PAIR
        if not indexed:  # no arbiter index for ON CONFLICT
            ops = [o for o in ops if not o[0].startswith("upsert")]
        kind = self.pick(ops)
        ret = "" if in_plpgsql or self.rng.random() < 0.7 else " RETURNING k, u, v"
        cols = "INSERT INTO {T} (k, u, v, t) VALUES "
        if kind == "insert1":
            sql = cols + self.row() + ret
        elif kind == "insert_multi":
            sql = cols + self.rows(2, 6) + ret
        elif kind == "insert_series":
            a, b = self.range_(20)
            off = self.rng.randrange(KEYS)
            conflict = self.rng.choice(["", " ON CONFLICT DO NOTHING", " ON CONFLICT DO NOTHING", " ON CONFLICT (k) DO NOTHING"])
            if not indexed:
                conflict = ""
            if deferrable and conflict == " ON CONFLICT DO NOTHING":
                conflict = " ON CONFLICT (k) DO NOTHING"  # deferrable constraints cannot be arbiters
            sql = (f"INSERT INTO {{T}} (k, u, v, t) SELECT g, (g + {off}) % {KEYS}, g % 7, 's{self.client}-' || g "
                   f"FROM generate_series({a}, {b}) g{conflict}") + ret
        elif kind == "update_t":
            a, b = self.range_()
            where = f"k = {a}" if self.rng.random() < 0.5 else f"k BETWEEN {a} AND {b}"
            sql = f"UPDATE {{T}} SET t = {self.t()} WHERE {where}" + ret
        elif kind == "update_v":
            a, b = self.range_()
            where = self.rng.choice([f"k BETWEEN {a} AND {b}", f"v = {self.v()}", f"k = {a}"])
            sql = f"UPDATE {{T}} SET v = v + {self.rng.randint(1, 5)} WHERE {where}" + ret
        elif kind == "update_u":
            if deferrable and self.rng.random() < 0.6:  # checked at statement end: order-independent
                a, b = self.range_(8)
                sql = f"UPDATE {{T}} SET u = u + 1 WHERE u BETWEEN {a} AND {b}" + ret
            elif self.rng.random() < 0.2:
                sql = f"UPDATE {{T}} SET u = NULL WHERE v = {self.v()}" + ret
            else:
                sql = f"UPDATE {{T}} SET u = {self.u()} WHERE k = {self.k()}" + ret
        elif kind == "update_k":
            sql = f"UPDATE {{T}} SET k = {self.k()}, t = {self.t()} WHERE k = {self.k()}" + ret
        elif kind == "delete":
            a, b = self.range_(8)
            where = self.rng.choice([f"k = {a}", f"k BETWEEN {a} AND {b}", f"v = {self.v()}", f"u = {a}"])
            sql = f"DELETE FROM {{T}} WHERE {where}" + ret
        elif kind == "upsert":
            target = "(k)" if deferrable or self.rng.random() < 0.7 else "(u)"
            sql = (f"INSERT INTO {{T}} AS r (k, u, v, t) VALUES {self.rows(1, 4)} ON CONFLICT {target} "
                   f"DO UPDATE SET v = r.v + EXCLUDED.v, t = EXCLUDED.t") + ret
        elif kind == "upsert_nothing":
            target = "(k)" if deferrable else self.rng.choice(["", "(k)", "(u)"])
            sql = f"INSERT INTO {{T}} (k, u, v, t) VALUES {self.rows(1, 4)} ON CONFLICT {target} DO NOTHING" + ret
        else:  # select
            a, b = self.range_(30)
            lock = self.rng.choice(["", "", " FOR UPDATE", " FOR SHARE", " FOR NO KEY UPDATE"])
            where = self.rng.choice([f"k BETWEEN {a} AND {b}", f"v = {self.v()}", f"u BETWEEN {a} AND {b}"])
            sql = f"SELECT (to_jsonb(x) - 't')::text, md5(x.t) FROM {{T}} x WHERE {where}{lock}"  # every column
        return Pair(sql, pair)

    def base(self) -> str:
        return self.rng.choice(BASE_PAIRS)

    def dml(self, lo: int, hi: int, pair: str | None = None) -> list:
        return [self.op(pair or self.base()) for _ in range(self.rng.randint(lo, hi))]

    def do_block(self) -> Plain:
        """A PL/pgSQL block writing both twins; it raises after writing (60%), so its writes roll back."""
        body, pairs = [], set()
        for _ in range(self.rng.randint(1, 3)):
            step = self.op(self.base(), in_plpgsql=True)
            body += [step.sql("p") + ";", step.sql("h") + ";"]
            pairs.add(step.pair)
        if self.rng.random() < 0.6:
            body.append("RAISE EXCEPTION 'diffcrash: roll the block back';")
        return Plain("DO $$ BEGIN " + " ".join(body) +
                     " EXCEPTION WHEN raise_exception OR unique_violation THEN NULL; END $$", tuple(sorted(pairs)))

    def create_extra(self) -> list:
        x = self.extra
        steps = [Pair("DROP TABLE IF EXISTS {T}", x)]
        steps += [Pair(s.replace(f"{x}_p", "{T}").replace("pasv", "{AM}"), x) for s in table_ddl(f"{x}_p", "pasv", False)]
        steps += self.dml(1, 3, x)
        if self.rng.random() < 0.5:  # TRUNCATE in the creating transaction
            steps += [Pair("TRUNCATE {T}", x)] + self.dml(0, 3, x)
        return steps

    def alter(self, pair: str) -> Pair:
        n = self.rng.randint(1, 9)
        return Pair(self.rng.choice([
            f"ALTER TABLE {{T}} ADD COLUMN IF NOT EXISTS e1 int DEFAULT {n}",
            f"ALTER TABLE {{T}} ADD COLUMN IF NOT EXISTS e2 int DEFAULT (random() * 0)::int + {n}",  # volatile: rewrite
            f"ALTER TABLE {{T}} DROP COLUMN IF EXISTS e{self.rng.randint(1, 2)}",
            f"ALTER TABLE {{T}} ALTER COLUMN v TYPE {self.rng.choice(['int', 'bigint'])}",
        ]), pair)

    def next_txn(self) -> Txn:
        self.n += 1
        kind = self.pick(self.KINDS)
        txn = Txn(self.n, kind, [])
        if kind == "dml":
            txn.steps = self.dml(1, 5)
        elif kind == "savepoint":
            inner = self.dml(1, 3)
            if self.rng.random() < 0.3:
                inner.append(Savepoint("s2", self.dml(1, 2), self.rng.random() < 0.5))
            txn.steps = self.dml(0, 2) + [Savepoint("s1", inner, self.rng.random() < 0.5)] + self.dml(0, 2)
        elif kind == "do_block":
            txn.steps = self.dml(0, 1) + [self.do_block() for _ in range(self.rng.randint(1, 2))] + self.dml(0, 1)
        elif kind == "error":  # a deliberate error, at top level or inside a savepoint
            steps = self.dml(1, 3) + [Plain("SELECT 1 / 0")]
            if self.rng.random() < 0.5:
                steps = [Savepoint("s1", steps, True)] + self.dml(1, 2)
            txn.steps = steps
        elif kind == "truncate":
            p = self.base()
            txn.steps = self.dml(0, 1, p) + [Pair("TRUNCATE {T}", p)] + self.dml(0, 3, p)
        elif kind == "alter":
            p = self.base()
            txn.steps = [self.alter(p)] + self.dml(0, 2, p)
        elif kind == "cluster":
            p = self.rng.choice(INDEXED_PAIRS)
            txn.steps = [Pair(f"CLUSTER {{T}} USING {{T}}_{self.rng.choice(['pkey', 'v'])}", p)] + self.dml(0, 1, p)
        elif kind == "vacuum":
            txn.autocommit = True
            txn.steps = [Pair(self.rng.choice(["VACUUM {T}", "VACUUM (FREEZE) {T}", "VACUUM FULL {T}",
                                               "ANALYZE {T}", "VACUUM (INDEX_CLEANUP ON) {T}"]), self.base())]
        elif kind == "extra_create":
            txn.steps = self.create_extra()
        elif kind == "extra_drop":
            txn.steps = [Pair("DROP TABLE IF EXISTS {T}", self.extra)]
        else:  # extra_dml
            txn.steps = self.dml(1, 3, self.extra)
        if txn.autocommit:
            return txn
        txn.commit = self.rng.random() >= (0.4 if kind.startswith("extra_") else 0.15)
        r = self.rng.random()
        if kind.startswith("extra_"):
            pass  # the extra pair may not exist: no LOCK TABLE, REPEATABLE READ
        elif r < 0.1:
            txn.iso = "SERIALIZABLE"
        elif r < 0.3:
            txn.iso = "READ COMMITTED"
        # ON CONFLICT decides on the latest committed rows, whatever the
        # snapshot: a writer committing between the pasv and the heap
        # statement would make the twins decide differently (heap against
        # heap would too). Such transactions lock their pairs as well.
        if not kind.startswith("extra_") and (txn.iso == "READ COMMITTED" or has_on_conflict(txn.steps)):
            locks = [Plain(f"LOCK TABLE {p}_p, {p}_h IN EXCLUSIVE MODE", (p,)) for p in sorted(txn_pairs(txn.steps))]
            txn.steps = locks + txn.steps
        if self.rng.random() < 0.25:
            txn.steps.insert(0, Plain("SET LOCAL synchronous_commit = off"))
        if DEFERRABLE_PAIR in txn_pairs(txn.steps) and self.rng.random() < 0.2:
            txn.steps.insert(0, Plain("SET CONSTRAINTS ALL DEFERRED"))
        return txn


# ---- recording --------------------------------------------------------------

@dataclass
class CycleStats:
    acked: int = 0
    aborted: int = 0
    errors: Counter = field(default_factory=Counter)  # SQLSTATE of aborted transactions


class Recorder:
    """Findings and the statement log, shared by all threads."""

    def __init__(self, path: str):
        self.lock = threading.Lock()
        self.log = open(path, "w", encoding="utf-8")
        self.path = path
        self.findings: list[tuple[str, str]] = []  # (category, text) of the current cycle

    def stmt(self, who: str, sql: str, outcome: str):
        with self.lock:
            self.log.write(f"{who}: {short(sql, 400)} -> {outcome}\n")

    def note(self, text: str):
        with self.lock:
            self.log.write(text + "\n")

    def finding(self, category: str, text: str):
        with self.lock:
            self.findings.append((category, text))
            self.log.write(f"FINDING [{category}] {text}\n")
            self.log.flush()

    def take_findings(self) -> list[tuple[str, str]]:
        with self.lock:
            self.log.flush()
            out, self.findings = self.findings, []
            return out


# ---- a client ---------------------------------------------------------------

@dataclass
class Outcome:
    sqlstate: str | None
    rowcount: int
    rows: list | None
    status: str = ""  # the command tag

    def show(self) -> str:
        if self.sqlstate:
            return f"ERROR {self.sqlstate}"
        rows = "" if self.rows is None else f", rows {self.rows[:3]}{'...' if len(self.rows) > 3 else ''}"
        return f"ok, rowcount {self.rowcount}{rows}"


class CycleControl:
    """What the clients of one cycle share with the scheduler."""

    def __init__(self):
        self.stop = threading.Event()
        self.injected = threading.Event()  # set just before a crash is injected or a crash point armed
        self.lost = threading.Event()  # some client lost its connection
        self.lost_before_injection: list[str] = []


class Client:
    def __init__(self, idx: int, seed: int, conninfo: dict, rec: Recorder, quarantine: set[str]):
        self.idx = idx
        self.quarantine = quarantine  # pairs whose statements crashed a backend: their transactions are skipped
        self.seed = seed
        self.work = Workload(seed, idx)
        self.conninfo = conninfo
        self.rec = rec
        self.conn: psycopg.Connection | None = None
        self.backend_pid = 0
        self.stats = CycleStats()
        self.current = ""  # the statement in flight
        self.txn: Txn | None = None
        self.ctl = CycleControl()  # the current cycle's (after a crash was injected, errors are its consequences)

    def who(self) -> str:
        return f"s{self.seed} c{self.idx} x{self.txn.n if self.txn else 0}"

    # statement execution
    def execute(self, sql: str) -> Outcome:
        """Run one statement; ConnectionLost or StepFailed on error."""
        self.current = sql
        try:
            cur = self.conn.execute(sql)
            rows = cur.fetchall() if cur.description else None
            out = Outcome(None, cur.rowcount, sorted(rows, key=repr) if rows is not None else None, cur.statusmessage or "")
            self.rec.stmt(self.who(), sql, out.show())
            return out
        except psycopg.Error as e:
            if lost_connection(e, self.conn):
                self.rec.stmt(self.who(), sql, f"CONNECTION LOST: {short(str(e), 200)}")
                raise ConnectionLost(str(e)) from e
            self.rec.stmt(self.who(), sql, f"ERROR {e.sqlstate}: {short(str(e), 200)}")
            raise StepFailed(e.sqlstate, str(e)) from e

    def try_execute(self, sql: str) -> Outcome:
        """Run one statement inside a savepoint of its own; an error is an outcome."""
        self.execute("SAVEPOINT dc_probe")
        try:
            out = self.execute(sql)
            self.execute("RELEASE SAVEPOINT dc_probe")
            return out
        except StepFailed as f:
            self.execute("ROLLBACK TO SAVEPOINT dc_probe")
            return Outcome(f.sqlstate, 0, None)

    def run_pair(self, step: Pair, trace: list, probe_at: list):
        p_sql, h_sql = step.sql("p"), step.sql("h")
        trace.append(step)
        try:
            rp = self.execute(p_sql)
        except StepFailed as f:
            if f.sqlstate in PROBED and not probe_at:
                probe_at.append(len(trace))
            elif f.sqlstate not in TRANSIENT | PROBED | {UNDEFINED_TABLE} and not self.ctl.injected.is_set():
                self.rec.finding("pasv error", f"{self.who()}: the pasv statement failed with {f.sqlstate} "
                                 f"(heap cannot for this workload): {short(str(f), 400)}\n      SQL: {short(p_sql)}")
            raise
        try:
            rh = self.execute(h_sql)
        except StepFailed as f:
            if f.sqlstate not in TRANSIENT:
                self.rec.finding("divergent error", f"{self.who()}: heap failed with {f.sqlstate} where pasv "
                                 f"succeeded ({rp.show()}): {short(str(f), 300)}\n      SQL: {short(h_sql)}")
            raise
        if (rp.rowcount, rp.rows) != (rh.rowcount, rh.rows):
            self.rec.finding("divergent result", f"{self.who()} ({self.txn.iso}): pasv {rp.show()}; heap {rh.show()}"
                             f"\n      SQL: {short(p_sql)}")

    def run_steps(self, steps: list, trace: list, probe_at: list):
        for s in steps:
            if isinstance(s, Pair):
                self.run_pair(s, trace, probe_at)
            elif isinstance(s, Plain):
                trace.append(s)
                self.execute(s.sql)
            else:
                trace.append(Plain(f"SAVEPOINT {s.name}"))
                self.execute(f"SAVEPOINT {s.name}")
                try:
                    self.run_steps(s.steps, trace, probe_at)
                    end = f"RELEASE SAVEPOINT {s.name}" if s.release else f"ROLLBACK TO SAVEPOINT {s.name}"
                except StepFailed:
                    end = f"ROLLBACK TO SAVEPOINT {s.name}"
                trace.append(Plain(end))
                self.execute(end)

    def run_txn(self, txn: Txn):
        self.txn = txn
        self.rec.note(f"{self.who()}: {txn.kind} transaction" + ("" if txn.autocommit else f", ends with {'COMMIT' if txn.commit else 'ROLLBACK'}"))
        if txn.autocommit:
            for s in txn.steps:
                for side in ("p", "h"):
                    try:
                        self.execute(s.sql(side))
                    except StepFailed as f:
                        if f.sqlstate not in TRANSIENT and not self.ctl.injected.is_set():
                            self.rec.finding("pasv error" if side == "p" else "divergent error",
                                             f"{self.who()}: {f.sqlstate}: {short(str(f), 300)}\n      SQL: {s.sql(side)}")
                        self.stats.errors[f.sqlstate] += 1
                        break
            return
        trace: list = []
        probe_at: list = []
        self.execute(f"BEGIN ISOLATION LEVEL {txn.iso}")
        try:
            self.run_steps(txn.steps, trace, probe_at)
            out = self.execute("COMMIT" if txn.commit else "ROLLBACK")
            if out.status == "COMMIT":
                self.stats.acked += 1
            else:
                self.stats.aborted += 1
        except StepFailed as f:
            self.stats.aborted += 1
            self.stats.errors[f.sqlstate] += 1
            if self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self.execute("ROLLBACK")
        if probe_at:
            self.probe(txn, trace[:probe_at[0]])

    def probe(self, txn: Txn, trace: list):
        """Re-run the statements up to a failed pasv statement, both twins in their own savepoints."""
        self.rec.note(f"{self.who()}: probe of {len(trace)} statements")
        self.execute(f"BEGIN ISOLATION LEVEL {txn.iso}")
        try:
            for s in trace:
                if isinstance(s, Plain):
                    try:
                        self.execute(s.sql)
                    except StepFailed:
                        pass  # e.g. the deliberate error inside a savepoint: a ROLLBACK TO follows
                    continue
                rp, rh = self.try_execute(s.sql("p")), self.try_execute(s.sql("h"))
                if rp.sqlstate and not rh.sqlstate and rp.sqlstate not in TRANSIENT:
                    # A failed statement locks nothing: the row it collided with may have been deleted
                    # from both twins before the heap statement ran. A real divergence persists.
                    rp = self.try_execute(s.sql("p"))
                if rp.sqlstate in TRANSIENT or rh.sqlstate in TRANSIENT:
                    return
                if rp.sqlstate and not rh.sqlstate and self.ctl.injected.is_set():
                    # The crash may have hit while the probe ran (a crash point the load reached
                    # stops the engine before the postmaster ends the backends: "the pasv engine is
                    # not running"): as in run_pair, an error after the injection is its consequence.
                    return
                if (rp.sqlstate, rp.rowcount, rp.rows) != (rh.sqlstate, rh.rowcount, rh.rows):
                    cat = "divergent error" if rp.sqlstate or rh.sqlstate else "divergent result"
                    self.rec.finding(cat, f"{self.who()} probe ({txn.iso}): pasv {rp.show()}; heap {rh.show()}"
                                     f"\n      SQL: {short(s.sql('p'))}")
                    return
        except StepFailed:
            return  # the probe's transaction failed (e.g. a deadlock on LOCK TABLE): inconclusive
        finally:
            if self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self.execute("ROLLBACK")

    def connect(self, deadline: float):
        while True:
            try:
                self.conn = psycopg.connect(**self.conninfo, autocommit=True, options=CLIENT_OPTIONS)
                self.backend_pid = self.conn.info.backend_pid
                return
            except psycopg.Error as e:
                if time.monotonic() > deadline:
                    raise ConnectionLost(f"cannot connect: {e}") from e
                time.sleep(0.2)

    def run(self, ctl: CycleControl):
        """The thread: transactions until the connection is lost or ctl.stop."""
        self.stats = CycleStats()
        self.ctl = ctl
        try:
            self.connect(time.monotonic() + 30)
            while not ctl.stop.is_set():
                txn = self.work.next_txn()
                if txn_pairs(txn.steps) & self.quarantine:
                    self.rec.note(f"s{self.seed} c{self.idx} x{txn.n}: skipped (quarantined pair)")
                    time.sleep(0.001)
                    continue
                self.run_txn(txn)
        except ConnectionLost:
            if not ctl.injected.is_set():
                ctl.lost_before_injection.append(f"client {self.idx} (backend pid {self.backend_pid}) running: "
                                                 f"{short(self.current, 200)}")
            ctl.lost.set()
        except Exception as e:  # a harness bug: report it, never hang the scheduler
            self.rec.finding("harness", f"client {self.idx}: {type(e).__name__}: {e}")
            ctl.lost.set()
        finally:
            if self.conn is not None:
                self.conn.close()


# ---- the server -------------------------------------------------------------

def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Server:
    """The cluster under test: processes, pg_ctl, connections, its log."""

    def __init__(self, pg_bin: str, host: str, port: int, pgdata: str):
        self.pg_bin = pg_bin
        self.host = host
        self.port = port
        self.pgdata = os.path.realpath(pgdata)
        self.crash_log = os.path.join(self.pgdata, "crash.log")  # where our restarts log (as crash_ledger.sh)
        self.log_offsets: dict[str, int] = {}
        self.core_bug_17731 = 0  # startups that failed on PostgreSQL's BUG #17731 and were retried

    def conninfo(self, db: str = DB) -> dict:
        return dict(host=self.host, port=self.port, user="postgres", dbname=db, connect_timeout=10)

    def connect(self, db: str = DB) -> psycopg.Connection:
        return psycopg.connect(**self.conninfo(db), autocommit=True, options="-c statement_timeout=120s")

    def postmaster_pid(self) -> int | None:
        try:
            with open(os.path.join(self.pgdata, "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def cluster_pids(self) -> list[int]:
        """Live processes whose working directory is PGDATA (postgres keeps it; we run from /)."""
        out = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if os.readlink(f"/proc/{name}/cwd") == self.pgdata and alive(int(name)):
                        out.append(int(name))
                except OSError:
                    pass
        return out

    def engine_pid(self) -> int | None:
        for pid in self.cluster_pids():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"pasv engine" in f.read():
                        return pid
            except OSError:
                pass
        return None

    def pg_ctl(self, *args: str, timeout: int = 150) -> subprocess.CompletedProcess:
        return subprocess.run([os.path.join(self.pg_bin, "pg_ctl"), "-D", self.pgdata, *args],
                              capture_output=True, text=True, timeout=timeout, cwd="/")

    def start(self):
        r = self.pg_ctl("start", "-l", self.crash_log, "-w", "-t", "120")
        if r.returncode != 0 and self.hit_core_bug_17731():
            r = self.pg_ctl("start", "-l", self.crash_log, "-w", "-t", "120")
        if r.returncode != 0:
            raise Fatal(f"pg_ctl start failed: {r.stdout}{r.stderr}\n{self.log_tail()}")

    def stop(self, mode: str) -> bool:
        return self.pg_ctl("stop", "-m", mode, "-w", "-t", "60").returncode == 0

    @staticmethod
    def wait_gone(pids: list[int], seconds: float) -> list[int]:
        deadline = time.monotonic() + seconds
        while True:
            left = [p for p in pids if alive(p)]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    def kill_postmaster(self, rec: Recorder):
        """kill -9 the postmaster, wait for its children to go, start the server again."""
        pm = self.postmaster_pid()
        if pm is None or not alive(pm):
            raise Fatal("no postmaster to kill")
        old = self.cluster_pids()
        os.kill(pm, signal.SIGKILL)
        left = self.wait_gone(old, 60)
        if left:
            rec.finding("stuck process", f"processes of the killed cluster still alive 60 s after the postmaster's "
                        f"kill -9: {self.describe(left)}; killing them")
            for p in left:
                os.kill(p, signal.SIGKILL)
            self.wait_gone(left, 10)
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/{pm}") and time.monotonic() < deadline:  # a zombie blocks a new postmaster
            time.sleep(0.1)
        self.start()

    @staticmethod
    def describe(pids: list[int]) -> str:
        out = []
        for p in pids:
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    args = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                out.append(f"{p} ({args})")
            except OSError:
                out.append(str(p))
        return ", ".join(out)

    def hit_core_bug_17731(self) -> bool:
        """Whether the last startup failed on BUG #17731 (see CORE_BUG_17731); counts it."""
        if not CORE_BUG_17731.search(self.log_tail(60)):
            return False
        self.core_bug_17731 += 1
        return True

    def ensure_running(self):
        """After a postmaster crash-restart the server runs by itself; if it is gone, start it."""
        pm = self.postmaster_pid()
        if pm is None or not alive(pm):
            self.start()

    def wait_recovered(self, timeout: float = RECOVERY_TIMEOUT) -> float:
        """Until the server accepts connections, a pasv table answers and no database recovers."""
        t0 = time.monotonic()
        last = ""
        while time.monotonic() - t0 < timeout:
            try:
                with self.connect() as c:
                    c.execute("SELECT count(*) FROM t1_p")
                    if not c.execute("SELECT coalesce(bool_or(recovering), false) FROM pasv.database_status").fetchone()[0]:
                        return time.monotonic() - t0
                    last = "pasv.database_status shows a database recovering"
            except psycopg.Error as e:
                last = short(str(e), 200)
                pm = self.postmaster_pid()
                if (pm is None or not alive(pm)) and self.hit_core_bug_17731():
                    self.start()  # a crash restart by the postmaster failed on it: it shut down
            time.sleep(0.3)
        raise Fatal(f"the server did not recover within {timeout:.0f} s (last: {last})\n{self.log_tail()}")

    def recovering(self) -> bool | None:
        """Whether pasv recovers a database now (None: no answer)."""
        try:
            with psycopg.connect(**{**self.conninfo(), "connect_timeout": 2}, autocommit=True) as c:
                return c.execute("SELECT coalesce(bool_or(recovering), false) FROM pasv.database_status").fetchone()[0]
        except psycopg.Error:
            return None

    # the server log
    def log_files(self) -> list[str]:
        files = [self.crash_log]
        pm = self.postmaster_pid()
        try:
            cur = os.readlink(f"/proc/{pm}/fd/2")
            if os.path.isfile(cur) and cur not in files:
                files.insert(0, cur)
        except (OSError, TypeError):
            pass
        return files + [f for f in self.log_offsets if f not in files]

    def mark_log(self):
        for f in self.log_files():
            self.log_offsets[f] = os.path.getsize(f) if os.path.exists(f) else 0

    def log_since_mark(self) -> str:
        text = []
        for f in self.log_files():
            try:
                with open(f, errors="replace") as fh:
                    fh.seek(self.log_offsets.get(f, 0))
                    text.append(fh.read())
            except OSError:
                pass
        return "".join(text)

    def log_tail(self, n: int = 30) -> str:
        f = self.log_files()[0]
        try:
            with open(f, errors="replace") as fh:
                lines = fh.readlines()[-n:]
        except OSError:
            return ""
        return f"---- server log {f} (last {n} lines) ----\n" + "".join(lines) + "----"


# ---- one seed ---------------------------------------------------------------

@dataclass
class PairCheck:
    pair: str
    lost: int = 0
    phantom: int = 0
    mismatched: int = 0
    verify: int = 0
    details: list[str] = field(default_factory=list)

    def bad(self) -> bool:
        return bool(self.lost or self.phantom or self.mismatched or self.verify)


INDEX_QUERIES = (  # (index, query over the pasv table {T}): an index scan and a seq scan must agree
    ("pkey", "SELECT k, u, v, md5(t) FROM {T} ORDER BY k"),
    ("u", "SELECT k, u, v, md5(t) FROM {T} WHERE u IS NOT NULL ORDER BY u"),
    ("v", "SELECT k, u, v, md5(t) FROM {T} WHERE v IS NOT NULL ORDER BY v, k"),
)
SCAN_SETTINGS = {
    "index": "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_indexonlyscan = off",
    "bitmap": "SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off",
    "seq": "SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_indexonlyscan = off",
}


@dataclass
class KindTotals:
    runs: int = 0
    txns: int = 0
    lost: int = 0
    phantom: int = 0
    mismatched: int = 0
    verify: int = 0
    errors: int = 0


class SeedRun:
    """A fresh database, the clients of one seed, and its crash cycles."""

    def __init__(self, seed: int, server: Server, rec: Recorder, totals: dict[str, KindTotals], quarantine: set[str]):
        self.seed = seed
        self.quarantine = quarantine
        self.server = server
        self.rec = rec
        self.totals = totals
        self.sched = random.Random(seed * 1000)
        self.clients = [Client(i, seed, server.conninfo(), rec, quarantine) for i in range(1, CLIENTS + 1)]
        self.kinds: list[str] = []
        self.has_crash_point = False
        self.has_verify = False
        self.failed = False

    def setup(self):
        with self.server.connect("postgres") as c:
            c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
            c.execute(f"CREATE DATABASE {DB}")
        with self.server.connect() as c:
            c.execute("CREATE EXTENSION pasv")
            c.execute("CREATE FUNCTION dc_blob(s int, n int) RETURNS text IMMUTABLE LANGUAGE sql AS "
                      "$$ SELECT string_agg(md5(s || ':' || i), '' ORDER BY i) FROM generate_series(1, n) i $$")
            for pair in BASE_PAIRS:
                for table, am in zip(pair_tables(pair), ("pasv", "heap")):
                    for ddl in table_ddl(table, am, pair == DEFERRABLE_PAIR, pair == UNLOGGED_PAIR, pair != NOINDEX_PAIR):
                        c.execute(ddl)
                    c.execute(f"INSERT INTO {table} SELECT g, g, g % 17, 'init ' || g FROM generate_series(0, {KEYS - 1}, 2) g")
            # The initial rows, one bulk insert, are packed (HOT_PATH §44):
            # every later update, delete, VACUUM and replay meets packs.
            # Packed, the twin's 150 rows are a few RocksDB keys.
            if c.execute("SHOW pasv.pack_new_rows").fetchone()[0] == "on":
                keys = c.execute("SELECT approx_keys FROM pasv.column_families() "
                                 "WHERE relfilenumber = pg_relation_filenode('t1_p')").fetchone()[0]
                if keys >= KEYS // 2:
                    raise Fatal(f"t1_p's initial rows were not packed ({keys} RocksDB keys for {KEYS // 2} rows)")
            self.has_crash_point = c.execute(
                "SELECT to_regprocedure('pasv.crash_point(text,integer)') IS NOT NULL").fetchone()[0]
            self.has_verify = c.execute("SELECT to_regprocedure('pasv.verify(regclass)') IS NOT NULL").fetchone()[0]
            deadline = time.monotonic() + 60
            while c.execute("SELECT slot_state FROM pasv.database_status WHERE datname = current_database()").fetchone() \
                    != ("ready",):
                if time.monotonic() > deadline:
                    raise Fatal(f"the replication slot of {DB} is not ready after 60 s")
                time.sleep(0.2)
        kinds = list(TIME_KINDS) + ([f"point:{p}" for p in CRASH_POINTS] if self.has_crash_point else [])
        self.sched.shuffle(kinds)
        self.kinds = kinds

    def clear_crash_points(self):
        if self.has_crash_point:
            with self.server.connect() as c:
                c.execute("SELECT pasv.clear_crash_points()")

    # the crash of one cycle
    def start_clients(self, ctl: CycleControl) -> list[threading.Thread]:
        threads = [threading.Thread(target=cl.run, args=(ctl,), daemon=True) for cl in self.clients]
        for t in threads:
            t.start()
        return threads

    def join_clients(self, threads: list[threading.Thread]):
        deadline = time.monotonic() + 90
        for t, cl in zip(threads, self.clients):
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise Fatal(f"client {cl.idx} still runs 90 s after the crash, in: {short(cl.current)}")

    def second_crash_in_recovery(self, fast: bool) -> str:
        """After a first crash: start, and as soon as pasv recovers, crash (or stop -m fast) again."""
        self.server.start()
        deadline = time.monotonic() + 3
        seen = False
        while not seen and time.monotonic() < deadline:
            seen = bool(self.server.recovering())
            time.sleep(0.01)
        note = "while pasv recovered" if seen else "(no pasv recovery seen within 3 s)"
        if fast:
            if not self.server.stop("fast"):
                self.rec.finding("stuck shutdown", "pg_ctl stop -m fast during pasv recovery did not finish in 60 s")
                self.server.stop("immediate")
            note = "pg_ctl stop -m fast " + note
        else:
            self.server.stop("immediate")
            note = "pg_ctl stop -m immediate " + note
        self.server.start()
        return note

    def arm_replay_midway(self) -> str:
        """After a first crash: start, arm replay_midway at once, and wait for the recovery to reach it."""
        self.server.stop("immediate")
        self.server.start()
        seen = False
        try:
            with self.server.connect() as c:
                c.execute("SELECT pasv.crash_point('replay_midway', 0)")
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    rec = c.execute("SELECT coalesce(bool_or(recovering), false) FROM pasv.database_status").fetchone()[0]
                    seen |= rec
                    if (seen and not rec) or (not seen and time.monotonic() > deadline - 12):
                        break
                    time.sleep(0.02)
        except psycopg.Error:
            self.server.ensure_running()
            return "replay_midway reached"
        return "replay_midway not reached (" + ("recovery ended before it)" if seen else "no pasv recovery seen)")

    def nudge(self):
        """Make the server reach a crash point the clients may not reach soon (scratch table only)."""
        with self.server.connect() as c:
            for sql in SCRATCH_SQL:
                c.execute(sql)

    def arm_point(self, ctl: CycleControl, point: str) -> str:
        skip = self.sched.randint(0, 2)
        if ctl.lost.wait(self.sched.uniform(0.5, 1.5)):
            return ""
        ctl.injected.set()
        with self.server.connect() as c:
            c.execute("SELECT pasv.crash_point(%s, %s)", (point, skip))
        if ctl.lost.wait(6):
            return f"{point} (skip {skip}) reached by the load"
        try:
            self.nudge()
        except psycopg.Error:
            pass  # reached by the nudge: the server crashed under it
        if ctl.lost.wait(6):
            return f"{point} (skip {skip}) reached after a nudge"
        self.clear_crash_points()
        self.server.stop("immediate")
        self.server.start()
        return f"{point} (skip {skip}) not reached in 12 s: cleared; pg_ctl stop -m immediate instead"

    def inject(self, kind: str, ctl: CycleControl) -> str:
        """The crash of this cycle, on a loaded server; returns what happened."""
        delay = self.sched.uniform(1.5, 4.0)
        if kind.startswith("point:") and kind != "point:replay_midway":
            return self.arm_point(ctl, kind.split(":", 1)[1])
        victim_client = self.sched.randrange(CLIENTS)
        file_n = self.sched.randint(1, 40)
        if ctl.lost.wait(delay):
            return ""
        ctl.injected.set()
        if kind == "immediate":
            self.server.stop("immediate")
            self.server.start()
            return f"pg_ctl stop -m immediate after {delay:.1f} s"
        if kind == "kill-engine":
            pid = self.server.engine_pid()
            if pid is None:
                raise Fatal("no pasv engine process found")
            os.kill(pid, signal.SIGKILL)
            return f"kill -9 pasv engine (pid {pid}) after {delay:.1f} s"
        if kind == "kill-backend":
            pid = self.clients[victim_client].backend_pid
            if not pid or not alive(pid):
                raise Fatal(f"the backend of client {victim_client + 1} is gone before its kill")
            os.kill(pid, signal.SIGKILL)
            return f"kill -9 backend of client {victim_client + 1} (pid {pid}) after {delay:.1f} s"
        if kind == "kill-postmaster":
            self.server.kill_postmaster(self.rec)
            return f"kill -9 postmaster after {delay:.1f} s, pg_ctl start"
        if kind in ("recovery-kill", "recovery-fast-stop"):
            self.server.stop("immediate")
            return f"immediate after {delay:.1f} s, then " + self.second_crash_in_recovery(kind == "recovery-fast-stop")
        if kind == "recovery-file-point":
            with open(os.path.join(self.server.pgdata, "pasv_crash_point"), "w") as f:
                f.write(f"replay_after_messages={file_n}\n")
            self.server.stop("immediate")
            self.server.start()
            return f"immediate after {delay:.1f} s; file crash point replay_after_messages={file_n}"
        return f"immediate after {delay:.1f} s, " + self.arm_replay_midway()  # point:replay_midway

    def file_point_outcome(self, kind: str) -> str:
        """Whether the file crash point fired; an unread one is removed (it would fire in a later cycle)."""
        if kind != "recovery-file-point":
            return ""
        path = os.path.join(self.server.pgdata, "pasv_crash_point")
        if os.path.exists(path):
            os.unlink(path)
            return " (no recovery read it)"
        reached = "crash point reached" in self.server.log_since_mark()
        return " (reached: recovery crashed and ran again)" if reached else " (not reached: recovery applied fewer messages)"

    def log_findings(self, log: str, kind: str) -> list[str]:
        """Processes terminated by a signal we did not send, PANIC and TRAP lines, failed pasv recoveries;
        returns the statements the crashed processes ran."""
        crashed_sql = []
        point_armed = kind.startswith("point:") or kind == "recovery-file-point"
        we_killed = kind in ("kill-engine", "kill-backend")
        lines = log.splitlines()
        for i, line in enumerate(lines):
            m = re.search(r"\(PID (\d+)\) was terminated by signal (\d+)", line)
            bad = False
            if m:
                sig = int(m.group(2))
                bad = not ((sig == signal.SIGKILL and we_killed) or (sig == signal.SIGABRT and point_armed))
            elif ("PANIC:" in line and not point_armed) or line.startswith("TRAP:"):
                bad = True
            elif re.search(r"pasv recovery of database \d+ failed", line):
                # A fast shutdown may interrupt a recovery (it runs again at the next start), but not by
                # having the replay worker wait for an engine that the shutdown stopped.
                bad = kind != "recovery-fast-stop" or "did not become ready" in line
            if bad:
                self.rec.finding("server log", "server log:\n      " + "\n      ".join(lines[i:i + 3]))
                if m and i + 1 < len(lines) and "Failed process was running: " in lines[i + 1]:
                    crashed_sql.append(lines[i + 1].split("Failed process was running: ", 1)[1])
        return crashed_sql

    def quarantine_pairs(self, crashed_sql: list[str]) -> list[str]:
        """A pair named by a statement that crashed a backend is left alone from now on (all seeds),
        so that one crash bug does not hide all others. COMMIT and the like name no pair."""
        new = []
        for sql in crashed_sql:
            for pair in re.findall(r"\b(\w+)_p\b", sql):
                if pair not in self.quarantine:
                    self.quarantine.add(pair)
                    new.append(pair)
        return new

    # the checks
    def check_pair(self, c: psycopg.Connection, pair: str) -> PairCheck:
        p, h = pair_tables(pair)
        res = PairCheck(pair)
        # every column, t shortened to its length and md5
        show = "(to_jsonb(d) - 't')::text || ' t=' || coalesce(length(d.t) || ':' || left(md5(d.t), 8), 'NULL')"
        for attr, a, b in (("lost", h, p), ("phantom", p, h)):
            diff = f"(SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b}) d"
            n = c.execute(f"SELECT count(*) FROM {diff}").fetchone()[0]
            if n:
                setattr(res, attr, n)
                rows = [r[0] for r in c.execute(f"SELECT {show} FROM {diff} ORDER BY d.k LIMIT 5")]
                res.details.append(f"{n} {attr} row(s): in {a} but not in {b}, e.g. " + "; ".join(rows))
        for index, q in INDEX_QUERIES:
            got = {}
            for mode, settings in SCAN_SETTINGS.items():
                with c.transaction():
                    c.execute(settings)
                    got[mode] = Counter(c.execute(q.replace("{T}", p)).fetchall())
            for mode in ("index", "bitmap"):
                extra, missing = got[mode] - got["seq"], got["seq"] - got[mode]
                n = sum(extra.values()) + sum(missing.values())
                if n:
                    res.mismatched += n
                    res.details.append(f"{mode} scan of {p} over its {index} index vs seq scan: "
                                       f"{sum(missing.values())} row(s) missing, e.g. {list(missing)[:3]}; "
                                       f"{sum(extra.values())} extra, e.g. {list(extra)[:3]}")
        if self.has_verify:
            problems = c.execute(f"SELECT * FROM pasv.verify('{p}'::regclass)").fetchall()
            if problems:
                res.verify = len(problems)
                res.details.append(f"pasv.verify({p}): {len(problems)} problem(s), e.g. {problems[:3]}")
        return res

    def check(self) -> list[PairCheck]:
        out = []
        with self.server.connect() as c:
            names = {r[0] for r in c.execute(
                "SELECT relname FROM pg_class WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace")}
            pairs = sorted({n[:-2] for n in names if n.endswith(("_p", "_h"))})
            for pair in pairs:
                p, h = pair_tables(pair)
                if p not in names or h not in names:
                    res = PairCheck(pair, lost=int(h in names), phantom=int(p in names))
                    res.details.append(f"only {p if p in names else h} exists")
                    out.append(res)
                    continue
                try:
                    res = self.check_pair(c, pair)
                except psycopg.Error as e:
                    res = PairCheck(pair, mismatched=1, details=[f"checking queries failed: {short(str(e), 400)}"])
                    if lost_connection(e, c):
                        self.rec.finding("unexpected crash", f"the server closed the connection during the check of {pair}")
                        out.append(res)
                        self.server.ensure_running()
                        self.server.wait_recovered()
                        return out
                out.append(res)
                if res.bad():
                    self.resync(c, pair)
        return out

    def resync(self, c: psycopg.Connection, pair: str):
        """X_p := X_h, so later cycles test afresh."""
        p, h = pair_tables(pair)
        try:
            with c.transaction():
                c.execute(f"TRUNCATE {p}")
                c.execute(f"INSERT INTO {p} SELECT * FROM {h}")
        except psycopg.Error as e:
            self.rec.finding("resync", f"re-synchronising {p} from {h} failed: {short(str(e), 300)}")

    # a cycle
    def cycle(self, label: str, n: int):
        """One crash of the loaded server, the recovery, the checks; prints one line (and the failures)."""
        kind = self.kinds[n % len(self.kinds)]
        self.server.mark_log()
        ctl = CycleControl()
        t0 = time.monotonic()
        threads = self.start_clients(ctl)
        try:
            what = self.inject(kind, ctl)
            if not what:
                ctl.stop.set()
                kind, what = "unplanned", "connection lost before any crash was injected"
            self.join_clients(threads)
            self.server.ensure_running()
            recovered_in = self.server.wait_recovered()
            self.clear_crash_points()
            what += self.file_point_outcome(kind)
        except Fatal:
            ctl.stop.set()
            raise
        if ctl.lost_before_injection:
            self.rec.finding("unexpected crash", "connections lost with no crash injected:\n      "
                             + "\n      ".join(ctl.lost_before_injection))
        quarantined = self.quarantine_pairs(self.log_findings(self.server.log_since_mark(), kind))
        checks = self.check()
        findings = self.rec.take_findings()
        acked = sum(cl.stats.acked for cl in self.clients)
        aborted = sum(cl.stats.aborted for cl in self.clients)
        tot = self.totals.setdefault(kind, KindTotals())
        tot.runs += 1
        tot.txns += acked
        for r in checks:
            tot.lost += r.lost
            tot.phantom += r.phantom
            tot.mismatched += r.mismatched
            tot.verify += r.verify
        tot.errors += len(findings)
        bad = [r for r in checks if r.bad()]
        status = "ok" if not bad and not findings else "FAIL"
        print(f"{label} {kind:<34} {acked:4d} acked, {aborted:4d} aborted; {what}; "
              f"recovered in {recovered_in:.1f} s; {len(checks)} pairs: {status}  ({time.monotonic() - t0:.0f} s)",
              flush=True)
        for pair in quarantined:
            print(f"    pair {pair} quarantined: a statement on {pair}_p crashed a backend (see below); "
                  f"transactions touching it are skipped from now on")
        for r in bad:
            print(f"    FAIL {r.pair}: lost {r.lost}, phantom {r.phantom}, mismatched {r.mismatched}, verify {r.verify}")
            for d in r.details:
                print(f"      {d}")
        shown = Counter()
        for cat, text in findings:
            shown[cat] += 1
            if shown[cat] <= 3:
                print(f"    FAIL [{cat}] " + "\n".join(ln if len(ln) <= 700 else ln[:700] + "..." for ln in text.split("\n")))
        for cat, n in shown.items():
            if n > 3:
                print(f"    ... {n - 3} more [{cat}] findings (statement log: {self.rec.path})")
        if status == "FAIL":
            self.failed = True
            self.rec.note(f"---- {label} failed; server log since the cycle began ----\n{self.server.log_since_mark()}")
            lines = [ln for ln in self.server.log_since_mark().splitlines()
                     if re.search(r"PANIC|TRAP|terminated by signal|Failed process|crash point|pasv.*(ERROR|WARNING)"
                                  r"|(ERROR|WARNING|FATAL):.*pasv", ln)
                     and "terminating connection because of crash" not in ln]
            for ln in lines[:12]:
                print(f"    log: {ln}")


# ---- main -------------------------------------------------------------------

def print_table(totals: dict[str, KindTotals]):
    cols = ("runs", "txns checked", "lost", "phantom", "mismatched", "verify", "errors")
    print(f"\n{'crash kind':<34}" + "".join(f"{c:>14}" for c in cols))
    sums = KindTotals()
    for kind in sorted(totals):
        t = totals[kind]
        vals = (t.runs, t.txns, t.lost, t.phantom, t.mismatched, t.verify, t.errors)
        print(f"{kind:<34}" + "".join(f"{v:>14}" for v in vals))
        for name, v in zip(("runs", "txns", "lost", "phantom", "mismatched", "verify", "errors"), vals):
            setattr(sums, name, getattr(sums, name) + v)
    print(f"{'total':<34}" + "".join(f"{v:>14}" for v in (sums.runs, sums.txns, sums.lost, sums.phantom,
                                                             sums.mismatched, sums.verify, sums.errors)))
    print("errors: unexpected crashes, pasv-only or divergent errors and results during the load (see FAIL lines)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pg-bin", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pgdata", required=True)
    ap.add_argument("--seed", type=int, action="append", help="run this seed (repeatable); default: "
                    f"{', '.join(map(str, SHORT_SEEDS))} and one fresh random seed")
    ap.add_argument("--long", type=int, metavar="N_CRASHES", help="N crash cycles, a new seed every --cycles-per-seed")
    ap.add_argument("--cycles-per-seed", type=int,
                    help=f"default {SHORT_CYCLES_PER_SEED}, with --long {LONG_CYCLES_PER_SEED}")
    ap.add_argument("--workdir", help="keep the statement log there (default: a new directory under $TMPDIR, "
                    "removed when every check held)")
    args = ap.parse_args()

    per_seed = args.cycles_per_seed or (LONG_CYCLES_PER_SEED if args.long else SHORT_CYCLES_PER_SEED)
    fresh = random.SystemRandom()
    seeds = list(args.seed or [])
    if args.long:
        while len(seeds) * per_seed < args.long:
            seeds.append(fresh.randrange(1, 10 ** 6))
        plan = [(s, min(per_seed, args.long - i * per_seed)) for i, s in enumerate(seeds) if i * per_seed < args.long]
    else:
        seeds = seeds or [*SHORT_SEEDS, fresh.randrange(1, 10 ** 6)]
        plan = [(s, per_seed) for s in seeds]
    for s, _ in plan:
        print(f"seed: {s}")
    sys.stdout.flush()

    workdir = args.workdir or tempfile.mkdtemp(prefix="diffcrash.")
    os.makedirs(workdir, exist_ok=True)
    rec = Recorder(os.path.join(workdir, "statements.log"))
    server = Server(args.pg_bin, args.host, args.port, args.pgdata)
    totals: dict[str, KindTotals] = {}
    quarantine: set[str] = set()
    failed = False
    t0 = time.monotonic()
    try:
        for s, cycles in plan:
            run = SeedRun(s, server, rec, totals, quarantine)
            rec.note(f"==== seed {s}")
            run.setup()
            print(f"seed {s}: database {DB} ready (pasv.crash_point: {'yes' if run.has_crash_point else 'no'}, "
                  f"pasv.verify: {'yes' if run.has_verify else 'no'}); crash kinds in order: "
                  f"{', '.join(run.kinds[:cycles])}", flush=True)
            for n in range(cycles):
                run.cycle(f"[seed {s} {n + 1}/{cycles}]", n)
            failed |= run.failed
    except (Fatal, psycopg.Error) as e:
        print(f"FATAL: {type(e).__name__}: {e}")
        failed = True
    finally:
        rec.log.close()
    print_table(totals)
    if server.core_bug_17731:
        print(f"startups retried after PostgreSQL's BUG #17731 (an unlogged main fork in the way of its "
              f"init fork's copy; see CORE_BUG_17731): {server.core_bug_17731}")
    if quarantine:
        print(f"quarantined pairs (a statement on them crashed a backend): {', '.join(sorted(quarantine))}")
    if failed or args.workdir:
        print(f"statement log: {rec.path}")
    else:
        shutil.rmtree(workdir)
    print(f"diffcrash took {time.monotonic() - t0:.0f} s; seeds: {' '.join(str(s) for s, _ in plan)}")
    print("diffcrash: FAILED (re-run a seed with --seed N: same transactions and crash kinds, crash timing varies)"
          if failed else "diffcrash: all checks held")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
