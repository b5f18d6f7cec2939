// The page: the window (egui, in WebAssembly on this thread) shows the run; the engine trains
// in a worker (a CPU run blocks while it trains). This script carries the worker's events to
// the window and the console (one JSON line each, the keys of `trainer-cli --json`), the
// user's folder to the worker, and the window's buttons to both.
import init, { PageWindow } from "./pkg/headroom_web.js";

const query = location.search;
const $ = (id) => document.getElementById(id);
// The run's files, by name: their object URLs.
const files = new Map();
let worker = null;
let view = null;
// The user's folder, picked or dropped: {path, file} with the path from the folder's name
// down; empty for the built-in dataset.
let picked = [];
// The checkpoint to resume from: the files the user chose, {name, file}; empty for a new run.
let resumeFrom = [];

// An error before the window exists (no WebGL, say) shows in the page's own text.
function fail(message) {
  console.error("headroom error: " + message);
  if (view) view.fail(message);
  else $("fallback").textContent = "Error: " + message;
}

// Only the files that can be clips are read into memory.
const isClip = (path) => /\.(wav|npy)$/i.test(path);

function choose(found, how) {
  picked = found.filter((f) => isClip(f.path));
  const folders = [...new Set(picked.map((f) => f.path.split("/")[0]))];
  view.data(picked.length
    ? `${picked.length} .wav/.npy files ${how} (${folders.join(", ")})`
    : `no .wav or .npy files ${how}: the built-in dataset`);
}

// A checkpoint's three files, as a run offers them; the engine checks them and names a
// missing one.
const checkpointFiles = ["model.safetensors", "optimizer.burnpack", "state.json"];

$("checkpoint").onchange = async (e) => {
  resumeFrom = [...e.target.files].filter((f) => checkpointFiles.includes(f.name))
    .map((file) => ({ name: file.name, file }));
  e.target.value = "";
  if (!resumeFrom.length) {
    view.checkpoint("");
    fail("none of the chosen files is a checkpoint's (" + checkpointFiles.join(", ") + ")");
    return;
  }
  let step = "";
  const state = resumeFrom.find((f) => f.name === "state.json");
  try {
    if (state) step = ` (step ${JSON.parse(await state.file.text()).step})`;
  } catch (error) {
    step = " (its state.json is not readable: " + error + ")";
  }
  view.checkpoint(resumeFrom.map((f) => f.name).join(", ") + step);
};

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

// Caught on the way down (capture): eframe's canvas takes drops of files, not of folders.
window.addEventListener("dragover", (e) => { e.preventDefault(); e.stopPropagation(); }, true);
window.addEventListener("drop", async (e) => {
  e.preventDefault();
  e.stopPropagation();
  if (!view || view.running()) return;
  const entries = [...e.dataTransfer.items].map((i) => i.webkitGetAsEntry()).filter(Boolean);
  const found = [];
  try {
    for (const entry of entries) await walk(entry, found);
    choose(found, "dropped");
  } catch (error) {
    fail("cannot read the dropped files: " + error);
  }
}, true);

// `contents`: text, or bytes (a checkpoint's files).
function offer(name, contents) {
  if (files.has(name)) URL.revokeObjectURL(files.get(name));
  const type = typeof contents === "string" ? "text/csv" : "application/octet-stream";
  files.set(name, URL.createObjectURL(new Blob([contents], { type })));
  view.offered(name);
}

function download(name) {
  const link = document.createElement("a");
  link.href = files.get(name);
  link.download = name;
  link.click();
}

function handle(line) {
  console.log(line);
  view.event(line);
  // The window keeps every step it showed: losses.csv is its table.
  if (JSON.parse(line).event === "finished") {
    const csv = view.losses_csv();
    if (csv) offer("losses.csv", csv);
  }
}

// The picked files' bytes, and the checkpoint's, handed to the worker without a copy.
async function readPicked() {
  return Promise.all(picked.map(async ({ path, file }) =>
    ({ path, bytes: new Uint8Array(await file.arrayBuffer()) })));
}

async function readCheckpoint() {
  return Promise.all(resumeFrom.map(async ({ name, file }) =>
    ({ name, bytes: new Uint8Array(await file.arrayBuffer()) })));
}

// `settings`: the run's, as an address' query.
async function start(settings) {
  for (const url of files.values()) URL.revokeObjectURL(url);
  files.clear();
  view.starting();
  if (worker) worker.terminate();
  worker = new Worker(new URL("./worker.js", import.meta.url), { type: "module" });
  worker.onmessage = ({ data }) => {
    if (data.line !== undefined) {
      try { handle(data.line); } catch (e) { fail("cannot show an event: " + e); }
    } else if (data.file !== undefined) {
      offer(data.file.name, data.file.contents);
    } else if (data.note !== undefined) {
      console.warn("headroom: " + data.note);
      view.note(data.note);
    } else if (data.error !== undefined) {
      fail(data.error);
    } else if (data.done) {
      console.log("headroom: run ended");
      view.ended();
    }
  };
  worker.onerror = (e) => fail("the worker stopped: " + (e.message || "see the console"));
  let contents, checkpoint;
  try {
    contents = await readPicked();
    checkpoint = await readCheckpoint();
  } catch (error) {
    fail("cannot read the chosen files: " + error);
    return;
  }
  worker.postMessage({ query: settings, files: contents, checkpoint },
    [...contents, ...checkpoint].map((f) => f.bytes.buffer));
}

// What the user asks for in the window. Pause and Stop take effect at the next step
// boundary: the step under way finishes first.
function act(what, value) {
  switch (what) {
    case "start": start(value); break;
    case "pause": worker.postMessage({ pause: value }); break;
    case "stop": worker.postMessage({ stop: true }); break;
    case "pick": $("folder").click(); break;
    case "pick-checkpoint": $("checkpoint").click(); break;
    case "forget-checkpoint": resumeFrom = []; view.checkpoint(""); break;
    case "download": download(value); break;
  }
}

try {
  await init();
  view = await PageWindow.open($("window"), query, act);
  // For scripts and the page's tests: what the window shows (each painted text, where, in CSS
  // pixels of the page) and the run's files.
  window.headroom = {
    shown() {
      const corner = $("window").getBoundingClientRect();
      return JSON.parse(view.shown()).map((t) => ({ ...t, x: t.x + corner.left, y: t.y + corner.top }));
    },
    file: (name) => files.get(name) ?? null,
  };
  if (new URLSearchParams(query).get("start") === "1") start(query);
} catch (e) {
  fail("the page's window did not open: " + (e instanceof Error ? e.message : e));
}
