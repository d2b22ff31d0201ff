-- wrk script of scripts/bench-tunnel-proxy.sh: after wrk's own report, one line
-- "stalled=<percent>": the share of requests slower than STALL_US microseconds (default 300),
-- found by bisecting wrk's latency percentiles (its histogram has no count above a value).
local threshold = tonumber(os.getenv("STALL_US") or "300")

done = function(summary, latency, requests)
  local lo, hi = 0.0, 100.0
  if latency.max <= threshold then
    lo = 100.0
  else
    for _ = 1, 40 do
      local mid = (lo + hi) / 2
      if latency:percentile(mid) > threshold then hi = mid else lo = mid end
    end
  end
  io.write(string.format("stalled=%.3f\n", 100 - lo))
end
