// The engine runs here, off the page's thread: a CPU run blocks while it trains. The run
// hands the thread back at every step boundary, which is when Pause and Stop get in.
//
// The page has two modules (app/web/build): pkg/, with WebGPU and one CPU thread, and
// pkg-threads/, the CPU alone on rayon's threads (one Web Worker each, sharing this one's
// memory). A run on the CPU takes the second where it was built and the page is
// cross-origin isolated, which shared memory needs; anything else takes the first.
let engine = null;
let ready = null;

// The CPU as the engine reads the address's `backend` (settings.rs): asked for, or `auto`
// without a WebGPU adapter. Any other value goes to pkg/, which names what is wrong with it.
function onCpu(query, webgpu) {
  const asked = (new URLSearchParams(query).get("backend") ?? "auto").toLowerCase();
  return asked === "cpu" || (asked === "auto" && !webgpu);
}

// Loads the run's module (and its threads); returns whether the browser offers WebGPU. A
// module with threads that does not start (none built, or a browser that cannot run it)
// leaves the run to pkg/ on one thread, with a warning.
async function start(query) {
  const webgpu = "gpu" in navigator && (await navigator.gpu.requestAdapter()) !== null;
  if (onCpu(query, webgpu) && self.crossOriginIsolated) {
    try {
      const threaded = await import("./pkg-threads/headroom_web.js");
      await threaded.default();
      await threaded.initThreadPool(
        threaded.cpu_threads(query, navigator.hardwareConcurrency || 1));
      engine = threaded;
      return webgpu;
    } catch (e) {
      // Not "headroom: ...": the page's tests and benchmarks read those lines as a run's end.
      console.warn("no threads in this page (" + e + "): the CPU on one thread");
    }
  }
  engine = await import("./pkg/headroom_web.js");
  await engine.default();
  return webgpu;
}

// Pause and Stop before the module is up wait for it; after a failed start there is no run.
async function started() {
  await ready?.catch(() => {});
  return engine;
}

onmessage = async ({ data }) => {
  if (data.pause !== undefined) { (await started())?.pause(data.pause); return; }
  if (data.stop) { (await started())?.stop(); return; }
  try {
    ready = start(data.query);
    const webgpu = await ready;
    const page = new engine.Callbacks((line) => postMessage({ line }),
      (name, contents) => postMessage({ file: { name, contents } }),
      (text) => postMessage({ note: text }));
    await engine.train(data.query, webgpu, data.files || [], data.checkpoint || [], page);
    postMessage({ done: true });
  } catch (e) {
    postMessage({ error: e instanceof Error ? e.message : String(e) });
  }
};
