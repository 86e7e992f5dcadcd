#!/usr/bin/env python3
"""A reference reader and agent of fleet's presence protocol (docs/protocol.md), in Python with
no dependency beyond the standard library, to show what another language must do and to prove it
with fleet: CI runs it against a real redis-server, both ways (tests/process/protocol.rs).

    fleet_protocol.py read URL [NAME ...]          the rows, as JSON lines (fleet state -o json's
                                                   fields but schema); what it reports, on stderr
    fleet_protocol.py beat URL NAME [--ttl MS] [--hold REASON] [--load F] [--cores N]
    fleet_protocol.py agent URL NAME --interval MS --beats N [--ttl MS]
    fleet_protocol.py vectors FILE                 run docs/protocol-vectors.json; exit 1 on a miss

URL is redis://HOST:PORT or redis+unix:///PATH. The key prefix is "fleet" (FLEET_PREFIX to change
it). The agent does not answer power-off requests (docs/protocol.md, "What the reference agent
leaves out").
"""

import json
import os
import random
import socket
import sys
import time

PREFIX = os.environ.get("FLEET_PREFIX", "fleet")
MAX_VALUE = 2048  # a heartbeat is read with GETRANGE key 0 2048, never whole
MAX_TTL_MS = 30 * 24 * 3600 * 1000
MAX_AT_MS = 8 * 10**15
MAX_LOAD = 1e6
MAX_CORES = 2**32 - 1
MAX_DEPTH = 64
GRACE_MS = 1000  # the clock tolerance: a key a second past its deadline, or a beat a second ahead
# docs/protocol.md §2.3: the characters a hold reason may not hold, and the white space it may not
# be made of alone. Named one by one: no language's own tables are the protocol's.
CONTROL = {*range(0x00, 0x20), *range(0x7F, 0xA0)}
BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
SPACE = {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
         0x2028, 0x2029, 0x202F, 0x205F, 0x3000}


def key(kind, name=None):
    """Every key of the protocol, under the hash tag {P} (docs/protocol.md §1)."""
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
            return self.file.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")


def server_ms(time_reply):
    """TIME's [seconds, microseconds] as ms, the microseconds dropped (docs/protocol.md §3)."""
    secs, micros = (int(x) for x in time_reply)
    return secs * 1000 + micros // 1000


# --- strict JSON (docs/protocol.md §2.1) -------------------------------------------------------

class Number(str):
    """A JSON number as written: its form (integer or not) is the protocol's to judge."""


def _refuse(text):
    raise ValueError(f"{text} is not JSON")


def _walk(value, depth):
    """Nesting and strings: at most MAX_DEPTH deep, no lone surrogate (Python's json lets one
    through as a code point of its own)."""
    if isinstance(value, (list, dict)):
        if depth > MAX_DEPTH:
            raise ValueError("nested too deep")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for k, v in items:
            if isinstance(k, str):
                _walk(k, depth + 1)
            _walk(v, depth + 1)
    elif isinstance(value, str) and not isinstance(value, Number):
        if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            raise ValueError("a lone surrogate")


def strict_object(raw, last_counts=False):
    """The object `raw` (bytes) is, by docs/protocol.md §2.1, or None. A member named twice makes
    it None, unless `last_counts` (a hold request), where the last one counts."""
    def pairs(items):
        names = [k for k, _ in items]
        if not last_counts and len(set(names)) != len(names):
            raise ValueError("a member named twice")
        return dict(items)
    try:
        text = raw.decode("utf-8")  # strict: an encoded surrogate is not UTF-8 either
        value = json.loads(text, object_pairs_hook=pairs, parse_int=Number, parse_float=Number,
                           parse_constant=_refuse)
        if not isinstance(value, dict):
            return None
        _walk(value, 1)
        return value
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def integer(value):
    """The exact value of a number written as an integer (no fraction, no exponent), else None."""
    if isinstance(value, Number) and not any(c in value for c in ".eE"):
        return int(value)
    return None


def double(value):
    """A number's value as the nearest double (inf past the range), else None."""
    return float(value) if isinstance(value, Number) else None


def valid_reason(text):
    """A hold reason (docs/protocol.md §2.3): 1-256 characters (Unicode scalar values), not all
    white space, no control character and no bidirectional control."""
    return (
        isinstance(text, str) and not isinstance(text, Number)
        and any(ord(c) not in SPACE for c in text)
        and len(text) <= 256
        and not any(ord(c) in CONTROL or ord(c) in BIDI for c in text)
    )


def valid_name(name):
    """A bench name: an RFC 1123 subdomain (docs/protocol.md §1)."""
    if not 1 <= len(name) <= 253:
        return False
    for label in name.split("."):
        if not 1 <= len(label) <= 63 or label[0] == "-" or label[-1] == "-":
            return False
        if any(c not in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in label):
            return False
    return True


# --- the reading and the decision (docs/protocol.md §2, §3) ------------------------------------

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
    beat = strict_object(found)
    if beat is None or integer(beat.get("v")) != 1:
        return None, "unreadable"
    at, ttl, hold = integer(beat.get("at")), integer(beat.get("ttl")), beat.get("hold")
    if at is None or not 0 <= at <= MAX_AT_MS or ttl is None or not 0 <= ttl <= MAX_TTL_MS:
        return None, "unreadable"
    if hold is not None and not valid_reason(hold):
        return None, "unreadable"
    load, cores = double(beat.get("load")), integer(beat.get("cores"))
    # load and cores never have a say: out of range, or of another type, each is dropped alone.
    return {"at": at, "ttl": ttl, "hold": hold,
            "load": load + 0.0 if load is not None and 0 <= load <= MAX_LOAD else None,
            "cores": cores if cores is not None and 1 <= cores <= MAX_CORES else None}, None


def request_of(raw):
    """A hold request ({P}:holds's field), or None when there is none or it is not valid
    (docs/protocol.md §5.3): -> (reason, until or None)."""
    asked = strict_object(raw, last_counts=True) if isinstance(raw, bytes) else None
    if asked is None or not valid_reason(asked.get("reason")):
        return None
    until = asked.get("until")
    if until is None:
        return asked["reason"], None
    ms = double(until)
    if ms is None or ms != ms or abs(ms) > MAX_AT_MS or ms != int(ms):
        return None
    return asked["reason"], int(ms)


def standing(request, now_ms):
    """The request's reason while it stands at now_ms."""
    if request is None or (request[1] is not None and now_ms >= request[1]):
        return None
    return request[0]


ERRORS = {
    "wrong_type": "the key holds another type than a heartbeat",
    "too_large": "the value is longer than 2048 bytes",
    "unreadable": "the value is not a heartbeat",
    "future": "the beat was written more than a second after now",
    "outlived": "the key outlived its deadline by a second: written without its expiry",
}


def decide(found, now_ms, request=None):
    """The row of one bench at the server's now (docs/protocol.md §3): fleet state -o json's
    fields but name and schema; `request` is the bench's hold request as request_of gives it."""
    beat, kind = reading(found)
    row = {"state": "DOWN", "hold": None, "requested_hold": None, "load": None, "cores": None,
           "ttl_ms": None, "expires_in_ms": None, "error": None, "error_kind": kind}
    if beat is not None:
        deadline = beat["at"] + beat["ttl"]
        row.update(load=beat["load"], cores=beat["cores"])
        if beat["at"] - now_ms > GRACE_MS:
            row["error_kind"] = "future"
        elif now_ms < deadline:
            row.update(state="HELD" if beat["hold"] else "UP", hold=beat["hold"],
                       ttl_ms=beat["ttl"], expires_in_ms=deadline - now_ms)
        elif now_ms - deadline >= GRACE_MS:
            row["error_kind"] = "outlived"
    asked = standing(request, now_ms)
    row["requested_hold"] = None if asked == row["hold"] else asked
    row["error"] = ERRORS.get(row["error_kind"])
    return row


# --- the read (docs/protocol.md §4) ------------------------------------------------------------

def report(what):
    print(f"warning: {what}", file=sys.stderr)


def listed(r):
    """The whole fleet's names: the registry's bench names, and the legacy join set's that one of
    their own keys proves, with the members that are no bench names reported."""
    registry, joined_count = r.pipeline(["SMEMBERS", key("registry")], ["SCARD", key("joined")])
    if isinstance(registry, RespError):
        raise SystemExit(f"error: {key('registry')} is not a set: {registry}")
    names, members = set(), {m.decode("utf-8", "replace") for m in registry}
    for text in sorted(members):
        if valid_name(text):
            names.add(text)
        else:
            report(f"registry member {text!r} is not a bench name")
    count = joined_count if isinstance(joined_count, int) else 0
    if count > max(1024, len(registry)):
        report(f"{key('joined')} holds {count} names, more than a reader reads: it is not read")
    elif count:
        (joined,) = r.pipeline(["SMEMBERS", key("joined")])
        others = []
        for member in joined:
            try:
                others.append(member.decode("utf-8"))
            except UnicodeDecodeError:
                continue  # no key can name it: left out, unreported
        others = sorted(set(others) - members)
        # A join-set member counts (a bench name) or is reported (another) only while one of its
        # two keys exists.
        there = r.pipeline(*(["EXISTS", key("joined_key", m), key("bench", m)] for m in others))
        for member, count in zip(others, there):
            if count and valid_name(member):
                names.add(member)
            elif count:
                report(f"join-set member {member!r} is not a bench name")
    return sorted(names)


def read(url, names):
    """The fleet read: the names, then every heartbeat with GETRANGE, the hold requests, and TIME
    last, in one round trip."""
    for name in names:
        if not valid_name(name):
            raise SystemExit(f"error: {name!r} is not a bench name")
    r = Redis(url)
    names = sorted(set(names)) if names else listed(r)
    replies = r.pipeline(["HGETALL", key("holds")],
                         *(["GETRANGE", key("bench", n), 0, MAX_VALUE] for n in names), ["TIME"])
    holds, now = replies[0], server_ms(replies[-1])
    if isinstance(holds, RespError):
        report(f"{key('holds')} is not a hash of hold requests: requests are left out")
        holds = []
    requests = {holds[i].decode("utf-8", "replace"): holds[i + 1] for i in range(0, len(holds), 2)}
    return [dict(name=n, **decide(found, now, request_of(requests.get(n))))
            for n, found in zip(names, replies[1:-1])]


# --- the agent (docs/protocol.md §5) -----------------------------------------------------------

def changes(before, after, now_ms):
    """Whether writing `after` ((hold, deadline), or None: a TTL of 0) over the key as it was
    (`before`, its bytes or None) changes the state at now_ms: what a beat announces."""
    was = decide(before, now_ms)
    if was["state"] == "DOWN":
        return after is not None
    if after is None:
        return True
    beat, _ = reading(before)
    return was["hold"] != after[0] or after[1] < beat["at"] + beat["ttl"]


def again(at_ms, reply_ms, carried, due):
    """Whether a beat is sent again at once: its stamp more than a second off the reply's TIME,
    or the hold it carried not the one the reply's request gives."""
    return abs(reply_ms - at_ms) > GRACE_MS or carried != due


class Agent:
    """The beat: one pipeline of plain commands on the bench's own keys, stamped with the server's
    time of the last reply moved on by the monotonic clock."""

    def __init__(self, url, name, ttl_ms, hold=None, load=None, cores=None):
        self.r, self.name, self.ttl_ms = Redis(url), name, ttl_ms
        self.hold, self.load, self.cores = hold, load, cores
        self.register = True
        # The first beat of a process reads TIME, the key and the hold request first.
        now, value, request = self.r.pipeline(
            ["TIME"], ["GET", key("bench", name)], ["HGET", key("holds"), name])
        self.base, self.mono = server_ms(now), time.monotonic()
        self.last = value if isinstance(value, bytes) else None
        self.request = self.request_in(request)

    def request_in(self, reply):
        if isinstance(reply, RespError):
            report(f"{key('holds')} is not a hash of hold requests: no request is carried")
            return None
        request = request_of(reply)
        if reply is not None and request is None:
            report(f"the hold request of {self.name} is not one a reader accepts: not carried")
        return request

    def carried(self, at_ms, request):
        return self.hold or standing(request, at_ms)

    def beat(self, owed=False, once=True):
        """One beat; `owed` is a change of state a beat before it made and did not announce."""
        at = self.base + int((time.monotonic() - self.mono) * 1000)
        hold = self.carried(at, self.request)
        value = {"v": 1, "at": at, "ttl": self.ttl_ms}
        if hold:
            value["hold"] = hold
        if self.load is not None:
            value["load"] = self.load
        if self.cores is not None:
            value["cores"] = self.cores
        text = json.dumps(value, separators=(",", ":")).encode()
        after = (hold, at + self.ttl_ms) if self.ttl_ms > 0 else None
        announce = changes(self.last, after, at)
        bench, joined = key("bench", self.name), key("joined_key", self.name)
        commands = [["SADD", key("registry"), self.name]] if self.register else []
        commands += [["TIME"], ["GET", bench]]
        if self.ttl_ms > 0:
            commands += [["SET", bench, text, "PXAT", at + self.ttl_ms], ["SET", joined, at]]
        else:
            commands += [["DEL", bench], ["SET", joined, 0, "NX"]]
        commands.append(["HGET", key("holds"), self.name])
        if announce:
            commands.append(["SPUBLISH", key("wake"), self.name])
        replies = self.r.pipeline(*commands)
        if self.register:
            # A bench's own user may not register itself: it sends SADD no more.
            sadd, replies = replies[0], replies[1:]
            if isinstance(sadd, RespError) and sadd.args[0].startswith("NOPERM"):
                self.register = False
            elif isinstance(sadd, RespError):
                report(f"{key('registry')} could not be written ({sadd}): not registered")
        time_reply, before, set_value, set_joined, request = replies[:5]
        for reply in (time_reply, set_value, set_joined):
            if isinstance(reply, RespError):
                raise reply
        now = server_ms(time_reply)
        self.base, self.mono = now, time.monotonic()
        self.request = self.request_in(request)
        self.last = text if self.ttl_ms > 0 else None
        # The key as the SET found it (a key of another type reads as none).
        before = before if isinstance(before, bytes) else None
        # At once (docs/protocol.md §5.4): a change of state the beat did not announce (the key
        # was deleted or expired behind this process's back) is owed until a beat announces...
        owed = not announce and (owed or changes(before, after, now))
        # ...a beat the reply shows wrong (its stamp off the server's clock, or the hold it
        # carried not the one the reply's request gives) is sent again, once...
        if once and again(at, now, hold, self.carried(now, self.request)):
            return self.beat(owed=owed, once=False)
        # ...and what is still owed is announced.
        if owed:
            self.r.pipeline(["SPUBLISH", key("wake"), self.name])
        return at


def run_vectors(path):
    """Every group of docs/protocol-vectors.json, each vector by the rule it states."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    missed = total = 0

    def check(name, got, want):
        nonlocal missed, total
        total += 1
        if got != want:
            missed += 1
            print(f"MISS {name}: got {got}, want {want}")

    for v in doc["vectors"]:
        if v["type"] == "none":
            found = None
        elif v["type"] == "string":
            raw = bytes.fromhex(v["value_hex"]) if "value_hex" in v else v["value"].encode()
            found = raw[: MAX_VALUE + 1]
        else:
            found = RespError("WRONGTYPE Operation against a key holding the wrong kind of value")
        now = server_ms(v["time"]) if "time" in v else v["now_ms"]
        request = request_of(v["request"].encode()) if v.get("request") else None
        row = decide(found, now, request)
        row["error"] = row.pop("error_kind")
        want = {f: v[f] for f in ("state", "hold", "ttl_ms", "expires_in_ms", "error")}
        want.update({f: v[f] for f in ("load", "cores", "requested_hold") if f in v})
        check(v["name"], {f: row[f] for f in want}, want)
    for v in doc["time"]:
        check(v["name"], server_ms(v["time"]), v["now_ms"])
    for v in doc["names"]:
        check(repr(v["member"]), valid_name(v["member"]), v["bench"])
    for v in doc["requests"]:
        request = request_of(v["value"].encode())
        check(v["name"], (request is not None, standing(request, v["at_ms"])),
              (v["valid"], v["carried"]))
    for v in doc["announce"]:
        before = v["before"].encode() if v["before"] is not None else None
        after = (v["after"]["hold"], v["after"]["deadline_ms"]) if v["after"] else None
        check(v["name"], changes(before, after, v["now_ms"]), v["announce"])
    for v in doc["again"]:
        request = request_of(v["request"].encode()) if v["request"] else None
        due = v["own"] or standing(request, v["reply_ms"])
        check(v["name"], again(v["at_ms"], v["reply_ms"], v["carried"], due), v["again"])
    print(f"{total - missed} of {total} vectors read as the protocol says")
    return 1 if missed else 0


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    verb, args = argv[1], argv[2:]
    flags, rest, i = {}, [], 0
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
        interval = int(flags.get("interval", 10000))
        ttl = int(flags.get("ttl", 30000 if verb == "beat" else 3 * interval))
        if verb == "agent" and ttl < 2 * interval:
            print("error: the TTL must be at least two intervals", file=sys.stderr)
            return 2
        agent = Agent(rest[0], rest[1], ttl, flags.get("hold"), load, cores)
        beats = 1 if verb == "beat" else int(flags["beats"])
        for n in range(beats):
            if n:
                # Each wait jittered by up to a tenth either way, as fleet's agent does.
                time.sleep(interval * random.uniform(0.9, 1.1) / 1000)
            agent.beat()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
