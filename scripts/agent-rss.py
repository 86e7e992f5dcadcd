#!/usr/bin/env python3
"""Peak RSS of an installed fleet-agent: `python3 scripts/agent-rss.py BINARY` starts a private
redis-server, runs BINARY beating every 100 ms three times for about 20 beats each, and prints each
run's VmHWM and the median (the figure docs/measurements.md gives for `make dist`'s archive).

VmHWM is read from /proc before the agent stops: a child's ru_maxrss would be charged with this
Python process's own high-water mark, which the child inherits across fork and exec."""

import os
import signal
import subprocess
import sys
import tempfile
import time


def main(binary):
    sock = os.path.join(tempfile.mkdtemp(), "redis.sock")
    redis = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        peaks = []
        for _ in range(3):
            agent = subprocess.Popen(
                [binary, "--redis", "redis+unix://" + sock, "bench-01", "--interval", "100ms"],
                stderr=subprocess.DEVNULL,
            )
            time.sleep(2.2)
            with open(f"/proc/{agent.pid}/status") as status:
                hwm = next(l for l in status if l.startswith("VmHWM")).split()[1]
            peaks.append(int(hwm) * 1024 / 1e6)
            agent.send_signal(signal.SIGTERM)
            agent.wait()
        print("peak RSS (VmHWM) per run, MB:", ", ".join(f"{p:.2f}" for p in peaks))
        print(f"median: {sorted(peaks)[1]:.2f} MB (target 5 MB: {sorted(peaks)[1] / 5:.2f}x)")
    finally:
        redis.terminate()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/usr/local/bin/fleet-agent")
