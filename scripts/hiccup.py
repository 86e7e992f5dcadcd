"""How much this host stalls on its own (SPEC 5.7): sleeps 1 ms in a loop for the seconds given
and prints how far each sleep overshot (p50, p99, p99.9, max, and how many went over 5 ms and
50 ms). Run it on an idle host: `python3 scripts/hiccup.py 60`. A loop of this kind sees the
same stalls a beat's round trip would, with no Redis and no fleet involved."""
import time, sys
dur=float(sys.argv[1]); over=[]
end=time.monotonic()+dur
while time.monotonic()<end:
    t=time.monotonic(); time.sleep(0.001); over.append(time.monotonic()-t-0.001)
over.sort(); n=len(over)
q=lambda p: over[min(n-1,int(p*n))]*1000
print(f"samples {n} p50 {q(.5):.2f} ms p99 {q(.99):.2f} p99.9 {q(.999):.2f} max {over[-1]*1000:.1f} ms; >5ms {sum(1 for o in over if o>0.005)}, >50ms {sum(1 for o in over if o>0.05)}")
