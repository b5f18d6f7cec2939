// The page: starts the run in a worker (the engine blocks while it trains), writes each
// event to the console as one JSON line (the keys of `trainer-cli --json`) and draws it.
const query = location.search;
const $ = (id) => document.getElementById(id);
$("settings").textContent = "Settings: " + (query || "(the defaults; e.g. ?backend=cpu&steps=40&start=1)");

const mib = (b) => (b / 1048576).toFixed(0) + " MiB";
const losses = [];
let budget = null;

function fail(message) {
  console.error("headroom error: " + message);
  $("error").textContent = "Error: " + message;
  $("status").textContent = "stopped by an error";
  $("start").disabled = false;
}

function drawLoss() {
  const c = $("loss"), g = c.getContext("2d");
  g.clearRect(0, 0, c.width, c.height);
  if (losses.length < 2) return;
  const hi = Math.max(...losses), lo = Math.min(...losses), span = hi - lo || 1;
  g.strokeStyle = "#2e75b6"; g.beginPath();
  losses.forEach((l, i) => {
    const x = 5 + (i / (losses.length - 1)) * (c.width - 10);
    const y = 5 + (1 - (l - lo) / span) * (c.height - 10);
    i ? g.lineTo(x, y) : g.moveTo(x, y);
  });
  g.stroke();
  g.fillStyle = "#222"; g.fillText(hi.toFixed(4), 8, 14); g.fillText(lo.toFixed(4), 8, c.height - 6);
}

function showMemory(now, peak, limit) {
  const scale = Math.max(limit || 0, peak, 1);
  $("mem-now").style.width = (100 * now / scale) + "%";
  $("mem-peak").style.width = (100 * peak / scale) + "%";
  if (limit) $("mem-budget").style.width = (100 * limit / scale) + "%";
  $("mem-text").textContent = `in use ${mib(now)}, step peak ${mib(peak)}` + (limit ? `, budget ${mib(limit)}` : "");
}

function showResults(report) {
  let html = `<p>Anomaly scores of ${report.clips} test clips</p><table><tr><th>machine type</th><th>id</th><th>AUC</th><th>pAUC</th><th>normal</th><th>anomalous</th></tr>`;
  for (const r of report.per_machine) {
    html += `<tr><td>${r.machine_type}</td><td>${String(r.machine_id).padStart(2, "0")}</td><td>${r.auc.toFixed(3)}</td><td>${r.pauc.toFixed(3)}</td><td>${r.normal_clips}</td><td>${r.anomalous_clips}</td></tr>`;
  }
  html += `<tr><th>all</th><th>mean</th><th>${report.auc.toFixed(3)}</th><th>${report.pauc.toFixed(3)}</th><td></td><td></td></tr>`;
  $("results").innerHTML = html + "</table>";
}

function handle(body) {
  switch (body.event) {
    case "backend_choice": $("status").textContent = `backend ${body.backend}: ${body.reason}`; break;
    case "budget": budget = body.bytes; break;
    case "plan": $("plan").textContent = `Plan: ${body.reason}; ${body.precision}, checkpointing ${body.checkpointing ? "on" : "off"}`; break;
    case "config": $("mem-source").textContent = body.memory_source; break;
    case "step":
      losses.push(body.loss); drawLoss();
      $("status").textContent = `step ${body.step}/${body.total_steps}, loss ${body.loss.toFixed(4)}, ${body.patches_per_s.toFixed(0)} patches/s`;
      showMemory(body.mem_allocated_bytes, body.mem_peak_bytes, body.mem_budget_bytes ?? budget);
      break;
    case "finished": $("status").textContent = `finished at step ${body.step}/${body.total_steps} in ${body.elapsed_s.toFixed(1)} s`; break;
    case "evaluation": showResults(body); break;
  }
}

function start() {
  $("start").disabled = true;
  $("error").textContent = "";
  $("status").textContent = "loading the engine";
  const worker = new Worker(new URL("./worker.js", import.meta.url), { type: "module" });
  worker.onmessage = ({ data }) => {
    if (data.line !== undefined) {
      console.log(data.line);
      $("log").textContent += data.line + "\n";
      try { handle(JSON.parse(data.line)); } catch (e) { fail("cannot show an event: " + e); }
    } else if (data.error !== undefined) {
      fail(data.error);
    } else if (data.done) {
      console.log("headroom: run ended");
      $("start").disabled = false;
    }
  };
  worker.onerror = (e) => fail("the worker stopped: " + (e.message || "see the console"));
  worker.postMessage({ query });
}

$("start").onclick = start;
if (new URLSearchParams(query).get("start") === "1") start();
