// The page: starts the run in a worker (the engine blocks while it trains), writes each
// event to the console as one JSON line (the keys of `trainer-cli --json`) and draws it.
const query = location.search;
const $ = (id) => document.getElementById(id);
$("settings").textContent = "Settings: " + (query || "(the defaults; e.g. ?backend=cpu&steps=40&start=1)");

const mib = (b) => (b / 1048576).toFixed(0) + " MiB";
// One row per step (step, loss, patches/s, memory in use, peak): the curve and losses.csv.
const rows = [];
let budget = null;
let worker = null;
let paused = false;
// The user's folder, picked or dropped: {path, file} with the path from the folder's name
// down; empty for the built-in dataset.
let picked = [];

// Only the files that can be clips are read into memory.
const isClip = (path) => /\.(wav|npy)$/i.test(path);

function choose(files, how) {
  picked = files.filter((f) => isClip(f.path));
  const folders = [...new Set(picked.map((f) => f.path.split("/")[0]))];
  $("data").textContent = picked.length
    ? `${picked.length} .wav/.npy files ${how} (${folders.join(", ")})`
    : `no .wav or .npy files ${how}: the built-in dataset`;
}

$("folder").onchange = (e) =>
  choose([...e.target.files].map((file) => ({ path: file.webkitRelativePath || file.name, file })), "picked");

// A dropped folder is walked through its entries: the drop gives no relative paths.
async function walk(entry, found) {
  if (entry.isFile) {
    const file = await new Promise((ok, fail) => entry.file(ok, fail));
    found.push({ path: entry.fullPath.replace(/^\//, ""), file });
  } else if (entry.isDirectory) {
    const reader = entry.createReader();
    for (;;) {
      const batch = await new Promise((ok, fail) => reader.readEntries(ok, fail));
      if (!batch.length) break;
      for (const child of batch) await walk(child, found);
    }
  }
}

document.addEventListener("dragover", (e) => e.preventDefault());
document.addEventListener("drop", async (e) => {
  e.preventDefault();
  const entries = [...e.dataTransfer.items].map((i) => i.webkitGetAsEntry()).filter(Boolean);
  const found = [];
  try {
    for (const entry of entries) await walk(entry, found);
    choose(found, "dropped");
  } catch (error) {
    fail("cannot read the dropped files: " + error);
  }
});

function running(on) {
  $("start").disabled = on;
  $("pause").disabled = !on;
  $("stop").disabled = !on;
  if (!on) { paused = false; $("pause").textContent = "Pause"; }
}

function fail(message) {
  console.error("headroom error: " + message);
  $("error").textContent = "Error: " + message;
  $("status").textContent = "stopped by an error";
  running(false);
}

// A file of the run as a link: `id` names the link, so that a test can read it back.
// `contents`: text, or bytes (a checkpoint's files).
function offer(name, contents) {
  const id = "file-" + name.replace(/[^a-z0-9]/gi, "-");
  let link = $(id);
  if (!link) {
    link = document.createElement("a");
    link.id = id;
    link.download = name;
    link.textContent = name;
    if (!$("downloads").querySelector("a")) $("downloads").textContent = "";
    $("downloads").append(link, " ");
  } else {
    URL.revokeObjectURL(link.href);
  }
  const type = typeof contents === "string" ? "text/csv" : "application/octet-stream";
  link.href = URL.createObjectURL(new Blob([contents], { type }));
}

function offerLosses() {
  if (!rows.length) return;
  const header = "step,loss,patches_per_s,mem_allocated_bytes,mem_peak_bytes\n";
  offer("losses.csv", header + rows.map((r) => r.join(",")).join("\n") + "\n");
}

function drawLoss() {
  const losses = rows.map((r) => r[1]);
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
      rows.push([body.step, body.loss, body.patches_per_s, body.mem_allocated_bytes, body.mem_peak_bytes]);
      drawLoss();
      $("status").textContent = (paused ? "paused after " : "") +
        `step ${body.step}/${body.total_steps}, loss ${body.loss.toFixed(4)}, ${body.patches_per_s.toFixed(0)} patches/s`;
      showMemory(body.mem_allocated_bytes, body.mem_peak_bytes, body.mem_budget_bytes ?? budget);
      break;
    case "finished":
      $("status").textContent = `${body.stopped_early ? "stopped" : "finished"} at step ${body.step}/${body.total_steps} in ${body.elapsed_s.toFixed(1)} s`;
      offerLosses();
      break;
    case "evaluation": showResults(body); break;
  }
}

// The picked files' bytes, handed to the worker without a copy.
async function readPicked() {
  return Promise.all(picked.map(async ({ path, file }) =>
    ({ path, bytes: new Uint8Array(await file.arrayBuffer()) })));
}

async function start() {
  running(true);
  rows.length = 0;
  $("downloads").textContent = "none yet";
  $("note").textContent = "";
  $("error").textContent = "";
  $("status").textContent = "loading the engine";
  worker = new Worker(new URL("./worker.js", import.meta.url), { type: "module" });
  worker.onmessage = ({ data }) => {
    if (data.line !== undefined) {
      console.log(data.line);
      $("log").textContent += data.line + "\n";
      try { handle(JSON.parse(data.line)); } catch (e) { fail("cannot show an event: " + e); }
    } else if (data.file !== undefined) {
      offer(data.file.name, data.file.contents);
    } else if (data.note !== undefined) {
      console.warn("headroom: " + data.note);
      $("note").textContent = data.note;
    } else if (data.error !== undefined) {
      fail(data.error);
    } else if (data.done) {
      console.log("headroom: run ended");
      running(false);
    }
  };
  worker.onerror = (e) => fail("the worker stopped: " + (e.message || "see the console"));
  let files;
  try {
    if (picked.length) $("status").textContent = `reading ${picked.length} files`;
    files = await readPicked();
  } catch (error) {
    fail("cannot read the picked files: " + error);
    return;
  }
  worker.postMessage({ query, files }, files.map((f) => f.bytes.buffer));
}

// Both take effect at the next step boundary: the step under way finishes first.
function togglePause() {
  paused = !paused;
  worker.postMessage({ pause: paused });
  $("pause").textContent = paused ? "Resume" : "Pause";
  if (paused) $("status").textContent = "paused (after the step under way)";
}

function stop() {
  worker.postMessage({ stop: true });
  if (paused) worker.postMessage({ pause: false });
  $("pause").disabled = true;
  $("stop").disabled = true;
  $("status").textContent = "stopping (after the step under way)";
}

$("start").onclick = start;
$("pause").onclick = togglePause;
$("stop").onclick = stop;
if (new URLSearchParams(query).get("start") === "1") start();
