#!/usr/bin/env python3
"""A reference reader and agent of fleet's presence protocol (docs/protocol.md), in Python with
no dependency beyond the standard library, to show what another language must do and to prove it
with fleet: CI runs it against a real redis-server, both ways (tests/process/protocol.rs).

    fleet_protocol.py read URL [NAME ...]          the rows, as JSON lines (name, state, hold, ...)
    fleet_protocol.py beat URL NAME [--ttl MS] [--hold REASON] [--load F] [--cores N]
    fleet_protocol.py agent URL NAME --interval MS --beats N [--ttl MS]
    fleet_protocol.py vectors FILE                 run docs/protocol-vectors.json; exit 1 on a miss

URL is redis://HOST:PORT or redis+unix:///PATH. The key prefix is "fleet" (FLEET_PREFIX to change
it). The agent does not answer power-off requests (docs/protocol.md, "What this agent leaves out").
"""

import json
import os
import socket
import sys
import time
import unicodedata

PREFIX = os.environ.get("FLEET_PREFIX", "fleet")
MAX_VALUE = 2048  # a heartbeat is read with GETRANGE key 0 2048, never whole
MAX_TTL_MS = 30 * 24 * 3600 * 1000
GRACE_MS = 1000  # the clock tolerance: a key a second past its deadline, or a beat a second ahead
BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def key(kind, name=None):
    """Every key of the protocol, under the hash tag {P} (docs/protocol.md, "Keys")."""
    base = "{%s}" % PREFIX
    return {
        "bench": f"{base}:bench:{name}",
        "joined_key": f"{base}:joined:{name}",
        "joined": f"{base}:joined",
        "registry": f"{base}:benches",
        "holds": f"{base}:holds",
        "wake": f"{base}:wake",
    }[kind]


class RespError(Exception):
    """An error reply: kept per command, as a pipeline's replies are judged one by one."""


class Redis:
    """Just enough RESP2: commands as arrays of bulk strings, pipelined."""

    def __init__(self, url):
        if url.startswith("redis+unix://"):
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.connect(url[len("redis+unix://"):])
        elif url.startswith("redis://"):
            host, _, port = url[len("redis://"):].rstrip("/").rpartition(":")
            self.sock = socket.create_connection((host, int(port)), timeout=5)
        else:
            raise SystemExit(f"error: {url!r} is not redis://HOST:PORT or redis+unix:///PATH")
        self.file = self.sock.makefile("rb")

    def pipeline(self, *commands):
        out = bytearray()
        for command in commands:
            out += b"*%d\r\n" % len(command)
            for arg in command:
                arg = arg if isinstance(arg, bytes) else str(arg).encode()
                out += b"$%d\r\n%s\r\n" % (len(arg), arg)
        self.sock.sendall(out)
        return [self._reply() for _ in commands]

    def _reply(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.file.read(n + 2)[:-2]
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")


def server_ms(time_reply):
    """TIME's [seconds, microseconds] as milliseconds."""
    secs, micros = (int(x) for x in time_reply)
    return secs * 1000 + micros // 1000


def valid_reason(text):
    """A hold reason: 1-256 characters, not all white space, no control or bidi control."""
    return (
        isinstance(text, str)
        and text.strip() != ""
        and len(text) <= 256
        and not any(unicodedata.category(c) == "Cc" or ord(c) in BIDI for c in text)
    )


def reading(found):
    """One key as a bounded read found it -> (beat dict or None, error kind or None).
    found: None (no key), bytes (at most MAX_VALUE + 1 of them), or RespError (WRONGTYPE)."""
    if isinstance(found, RespError):
        if found.args[0].startswith("WRONGTYPE"):
            return None, "wrong_type"
        raise found  # any other error: the reader is blind, and never reads DOWN
    if not found:
        return None, None
    if len(found) > MAX_VALUE:
        return None, "too_large"
    try:
        beat = json.loads(found)
    except (ValueError, UnicodeDecodeError):
        return None, "unreadable"
    ints = all(
        isinstance(beat.get(f), int) and not isinstance(beat.get(f), bool) for f in ("v", "at", "ttl")
    ) if isinstance(beat, dict) else False
    if not ints or beat["v"] != 1 or beat["ttl"] < 0 or beat["ttl"] > MAX_TTL_MS:
        return None, "unreadable"
    if "hold" in beat and beat["hold"] is not None and not valid_reason(beat["hold"]):
        return None, "unreadable"
    return beat, None


def decide(found, now_ms):
    """The decision (docs/protocol.md, "The decision"): the row of one bench at the server's now."""
    beat, error = reading(found)
    row = {"state": "DOWN", "hold": None, "ttl_ms": None, "expires_in_ms": None, "error": error,
           "load": None, "cores": None}
    if beat is None:
        return row
    deadline = beat["at"] + beat["ttl"]
    load = beat.get("load")
    row["load"] = float(load) if isinstance(load, (int, float)) and load >= 0 else None
    row["cores"] = beat.get("cores")
    if beat["at"] - now_ms > GRACE_MS:
        row["error"] = "future"
    elif now_ms < deadline:
        hold = beat.get("hold")
        row.update(state="HELD" if hold else "UP", hold=hold, ttl_ms=beat["ttl"],
                   expires_in_ms=deadline - now_ms)
    elif now_ms - deadline >= GRACE_MS:
        row["error"] = "outlived"
    return row


def read(url, names):
    """The fleet read: the registry (and the previous release's join set, bounded), then every
    heartbeat with GETRANGE and TIME last, in one more round trip."""
    r = Redis(url)
    if not names:
        registry, joined_count = r.pipeline(["SMEMBERS", key("registry")], ["SCARD", key("joined")])
        listed = {m.decode() for m in registry}
        if isinstance(joined_count, int) and 0 < joined_count <= max(1024, len(listed)):
            (joined,) = r.pipeline(["SMEMBERS", key("joined")])
            legacy = sorted(m.decode() for m in joined if m.decode() not in listed)
            # A join-set name is a bench only while its join key or its heartbeat key exists.
            there = r.pipeline(*(["EXISTS", key("joined_key", n), key("bench", n)] for n in legacy))
            listed |= {n for n, count in zip(legacy, there) if count}
        names = sorted(listed)
    replies = r.pipeline(*(["GETRANGE", key("bench", n), 0, MAX_VALUE] for n in names), ["TIME"])
    now = server_ms(replies[-1])
    return [dict(name=n, **decide(found, now)) for n, found in zip(sorted(names), replies)]


class Agent:
    """The beat (docs/protocol.md, "The beat"): one pipeline of plain commands on the bench's own
    keys, stamped with the server's time of the last reply moved on by the monotonic clock."""

    def __init__(self, url, name, ttl_ms, hold=None, load=None, cores=None):
        self.r, self.name, self.ttl_ms = Redis(url), name, ttl_ms
        self.hold, self.load, self.cores = hold, load, cores
        # The first beat reads TIME, the key and the hold request first.
        now, value, request = self.r.pipeline(
            ["TIME"], ["GET", key("bench", name)], ["HGET", key("holds"), name])
        self.base, self.mono = server_ms(now), time.monotonic()
        self.last = value
        self.request = request

    def carried(self, at):
        """The hold this beat carries: its own, else an operator's request that stands."""
        if self.hold:
            return self.hold
        if not isinstance(self.request, bytes):
            return None
        try:
            asked = json.loads(self.request)
        except ValueError:
            return None
        until = asked.get("until") if isinstance(asked, dict) else None
        reason = asked.get("reason") if isinstance(asked, dict) else None
        if valid_reason(reason) and (until is None or (isinstance(until, (int, float)) and at < until)):
            return reason
        return None

    def beat(self):
        at = self.base + int((time.monotonic() - self.mono) * 1000)
        hold = self.carried(at)
        value = {"v": 1, "at": at, "ttl": self.ttl_ms}
        if hold:
            value["hold"] = hold
        if self.load is not None:
            value["load"] = self.load
        if self.cores is not None:
            value["cores"] = self.cores
        text = json.dumps(value, separators=(",", ":"))
        before = decide(self.last, at)
        after = decide(text.encode(), at) if self.ttl_ms > 0 else decide(None, at)
        changed = (before["state"], before["hold"]) != (after["state"], after["hold"]) or (
            after["state"] != "DOWN" and before["state"] != "DOWN"
            and after["expires_in_ms"] < before["expires_in_ms"])
        bench, joined = key("bench", self.name), key("joined_key", self.name)
        commands = [["SADD", key("registry"), self.name], ["TIME"], ["GET", bench]]
        if self.ttl_ms > 0:
            commands += [["SET", bench, text, "PXAT", at + self.ttl_ms], ["SET", joined, at]]
        else:
            commands += [["DEL", bench], ["SET", joined, 0, "NX"]]
        commands.append(["HGET", key("holds"), self.name])
        if changed:
            commands.append(["SPUBLISH", key("wake"), self.name])
        replies = self.r.pipeline(*commands)
        # SADD is refused to a bench's own user (it may not register itself): not an error.
        for reply in replies[1:]:
            if isinstance(reply, RespError):
                raise reply
        now, self.request = server_ms(replies[1]), replies[5]
        self.base, self.mono = now, time.monotonic()
        self.last = text.encode() if self.ttl_ms > 0 else None
        # A stamp more than a second off the server's own TIME is written again at once.
        if abs(now - at) > GRACE_MS:
            return self.beat()
        return at


def run_vectors(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    missed = 0
    for v in doc["vectors"]:
        if v["type"] == "none":
            found = None
        elif v["type"] == "string":
            found = v["value"].encode()[: MAX_VALUE + 1]
        else:
            found = RespError("WRONGTYPE Operation against a key holding the wrong kind of value")
        row = decide(found, v["now_ms"])
        want = {f: v[f] for f in ("state", "hold", "ttl_ms", "expires_in_ms", "error")}
        got = {f: row[f] for f in want}
        for f in ("load", "cores"):
            if f in v:
                want[f], got[f] = v[f], row[f]
        if got != want:
            missed += 1
            print(f"MISS {v['name']}: got {got}, want {want}")
    print(f"{len(doc['vectors']) - missed} of {len(doc['vectors'])} vectors read as the protocol says")
    return 1 if missed else 0


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    verb, args = argv[1], argv[2:]
    flags = {}
    rest = []
    i = 0
    while i < len(args):
        if args[i].startswith("--"):
            flags[args[i][2:]] = args[i + 1]
            i += 2
        else:
            rest.append(args[i])
            i += 1
    if verb == "vectors":
        return run_vectors(rest[0])
    if verb == "read":
        for row in read(rest[0], rest[1:]):
            print(json.dumps(row, ensure_ascii=False))
        return 0
    if verb in ("beat", "agent"):
        load = float(flags["load"]) if "load" in flags else None
        cores = int(flags["cores"]) if "cores" in flags else None
        agent = Agent(rest[0], rest[1], int(flags.get("ttl", 30000)), flags.get("hold"), load, cores)
        beats = 1 if verb == "beat" else int(flags["beats"])
        for n in range(beats):
            if n:
                time.sleep(int(flags["interval"]) / 1000)
            agent.beat()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
