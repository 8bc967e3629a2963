// Drives `bench/task` through Restate's ingress as `orchestrator bench`
// drives its tasks: a warm-up, then TASKS invocations with CONCURRENCY in
// flight (throughput), then SAMPLES one at a time (low-load latency), each
// with an idempotency key of its own. The CPU time the server and the
// service spend per invocation in the throughput run is read from /proc
// ($PIDS: "server,service"). Prints one JSON object.
import { readFileSync } from "node:fs";
import { randomUUID } from "node:crypto";
import http from "node:http";

const url = process.env.INGRESS + "/bench/task";
const tasks = Number(process.env.TASKS);
const concurrency = Number(process.env.CONCURRENCY);
const samples = Number(process.env.SAMPLES);
const [server, service] = process.env.PIDS.split(",").map(Number);
const ticks = Number(process.env.CLK_TCK || 100);

// Node's `http` with kept-alive connections, one per call in flight:
// `fetch` costs several times its CPU, which Restate's server would then
// lack on a machine they share.
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });

function post(body) {
  return new Promise((resolve, reject) => {
    const request = http.request(
      url,
      {
        method: "POST",
        agent,
        headers: {
          "content-type": "application/json",
          "content-length": Buffer.byteLength(body),
          "idempotency-key": randomUUID(),
        },
      },
      (answer) => {
        const chunks = [];
        answer.on("data", (c) => chunks.push(c));
        answer.on("end", () => resolve([answer.statusCode, Buffer.concat(chunks).toString()]));
        answer.on("error", reject);
      },
    );
    request.on("error", reject);
    request.end(body);
  });
}

async function invoke(i) {
  const started = process.hrtime.bigint();
  const [status, text] = await post(JSON.stringify({ n: i }));
  if (status !== 200 || JSON.parse(text).echoed?.n !== i) {
    throw new Error(`invocation ${i}: ${status} ${text}`);
  }
  return Number(process.hrtime.bigint() - started) / 1e6;
}

// Invocations 0..n, `inFlight` at a time; their latencies in ms.
async function run(n, inFlight, from) {
  const latencies = [];
  let next = 0;
  const lanes = Array.from({ length: Math.min(inFlight, n) }, async () => {
    while (next < n) {
      const i = from + next++;
      latencies.push(await invoke(i));
    }
  });
  await Promise.all(lanes);
  return latencies;
}

// CPU seconds (user + system) of a process so far.
function cpu(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(fields[11]) + Number(fields[12])) / ticks;
}

function figures(latencies, seconds) {
  const sorted = [...latencies].sort((a, b) => a - b);
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  return {
    count: latencies.length,
    per_second: latencies.length / seconds,
    p50_ms: at(0.5),
    p99_ms: at(0.99),
  };
}

await run(100, 8, 0);
const cpuBefore = [cpu(server), cpu(service), process.cpuUsage()];
let started = process.hrtime.bigint();
const busy = await run(tasks, concurrency, 1000);
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
const client = process.cpuUsage(cpuBefore[2]);
const perTask = (s) => (s * 1e6) / tasks;
const cpuPerTask = {
  server_us: perTask(cpu(server) - cpuBefore[0]),
  service_us: perTask(cpu(service) - cpuBefore[1]),
  client_us: (client.user + client.system) / tasks,
};
started = process.hrtime.bigint();
const quiet = await run(samples, 1, 1000 + tasks);
const quietSeconds = Number(process.hrtime.bigint() - started) / 1e9;
console.log(
  JSON.stringify({
    throughput: figures(busy, seconds),
    low_load: figures(quiet, quietSeconds),
    cpu_per_task: cpuPerTask,
    concurrency,
  }),
);
