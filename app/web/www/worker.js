// The engine runs here, off the page's thread: a CPU run blocks while it trains. The run
// hands the thread back at every step boundary, which is when Pause and Stop get in.
import init, { train, pause, stop, Callbacks } from "./pkg/headroom_web.js";

let ready = null;

onmessage = async ({ data }) => {
  if (data.pause !== undefined) { await ready; pause(data.pause); return; }
  if (data.stop) { await ready; stop(); return; }
  try {
    ready = init();
    await ready;
    const webgpu = "gpu" in navigator && (await navigator.gpu.requestAdapter()) !== null;
    const page = new Callbacks((line) => postMessage({ line }),
      (name, contents) => postMessage({ file: { name, contents } }),
      (text) => postMessage({ note: text }));
    await train(data.query, webgpu, data.files || [], data.checkpoint || [], page);
    postMessage({ done: true });
  } catch (e) {
    postMessage({ error: e instanceof Error ? e.message : String(e) });
  }
};
