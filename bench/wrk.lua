-- wrk script for the Largesse benchmarks (bench/common.py sets the environment).
--   BENCH_MODE=order: POST a valid single-reward order per request (random denomination 5..500 USD)
--   BENCH_MODE=get:   GET the path
-- Counts responses by status per thread and prints one "BENCH_JSON {...}" line at the end.
local mode = os.getenv("BENCH_MODE") or "get"
local path = os.getenv("BENCH_PATH") or "/"
local key = os.getenv("BENCH_API_KEY") or ""
local email = os.getenv("BENCH_EMAIL") or ""
local product = os.getenv("BENCH_PRODUCT") or "PGCNWBOOKS01US"
local headers = {["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json"}
-- BENCH_ORGS="key email;key email;...": each order goes to one of these organizations, at random.
-- BENCH_EXTERNAL_ID=1: each order carries a unique external_id, as most integrations send.
local orgs = {}
for entry in string.gmatch(os.getenv("BENCH_ORGS") or "", "[^;]+") do
  local k, e = string.match(entry, "^(%S+) (%S+)$")
  if k then table.insert(orgs, {headers = {["Authorization"] = "Bearer " .. k,
                                            ["Content-Type"] = "application/json"}, email = e}) end
end
if #orgs == 0 then table.insert(orgs, {headers = headers, email = email}) end
local with_external_id = os.getenv("BENCH_EXTERNAL_ID") == "1"
local counter = 0
local run_tag = ""

local threads = {}
local thread_id = 0

function setup(thread)
  thread_id = thread_id + 1
  thread:set("id", thread_id)
  table.insert(threads, thread)
end

counts = {}
local get_request = nil

function init(args)
  math.randomseed(os.time() * 1000 + (id or 0))
  run_tag = string.format("%x%x", os.time(), math.random(0, 0xfffffff))
  if mode ~= "order" then
    get_request = wrk.format("GET", path, headers)
  end
end

local prefix = '{"payment":{"funding_source_id":"balance"},"reward":{"products":["' .. product ..
  '"],"value":{"denomination":'
local middle = ',"currency_code":"USD"},"recipient":{"name":"Bench Recipient","email":"'
local suffix = '"},"delivery":{"method":"EMAIL"}}}'

function request()
  if mode == "order" then
    local org = orgs[math.random(1, #orgs)]
    local head = '{'
    if with_external_id then
      counter = counter + 1
      head = '{"external_id":"bench-' .. run_tag .. '-' .. (id or 0) .. '-' .. counter .. '",'
    end
    return wrk.format("POST", path, org.headers, head .. string.sub(prefix, 2) .. math.random(5, 500) .. middle ..
      org.email .. suffix)
  end
  return get_request
end

function response(status, hdrs, body)
  counts[status] = (counts[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    local c = t:get("counts")
    if c then
      for k, v in pairs(c) do total[k] = (total[k] or 0) + v end
    end
  end
  local parts = {}
  for k, v in pairs(total) do table.insert(parts, string.format('"%d":%d', k, v)) end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect_errors":%d,"read_errors":%d,' ..
    '"write_errors":%d,"timeouts":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"mean_us":%.1f,"max_us":%d,' ..
    '"statuses":{%s}}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max,
    table.concat(parts, ",")))
end
