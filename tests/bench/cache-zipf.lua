-- cache-zipf.lua: wrk script for tests/bench/cache-peers.sh: each request
-- asks for one of KEYS paths (/k/1 .. /k/KEYS), drawn from a Zipf
-- distribution of exponent S, as a site's popular and long-tail pages are.
-- The table of cumulative weights is made once; a draw is a binary search.
local KEYS = tonumber(os.getenv("ZIPF_KEYS") or "10000")
local S = tonumber(os.getenv("ZIPF_S") or "1.0")
local cdf = {}
local total = 0
for k = 1, KEYS do
  total = total + 1 / (k ^ S)
  cdf[k] = total
end
for k = 1, KEYS do cdf[k] = cdf[k] / total end
math.randomseed(tonumber(os.getenv("ZIPF_SEED") or "7"))

request = function()
  local u = math.random()
  local lo, hi = 1, KEYS
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  return wrk.format("GET", "/k/" .. lo)
end
