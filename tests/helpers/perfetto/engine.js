// Perfetto's trace processor (its WebAssembly build, as the Perfetto UI runs it in a web worker) over stdin and
// stdout: the bytes of the trace processor's RPC protocol in, its replies out. The Python side
// (tests/helpers/perfetto/__init__.py) speaks the protocol with the perfetto package's own client.
//
//   node engine.js DIR     DIR holds engine_bundle.js and trace_processor*.wasm (a Perfetto UI build)
//
// engine_bundle.js is built for a browser worker: it runs here in a V8 context of its own that has what a
// worker has (self, location, fetch and a synchronous XMLHttpRequest that read DIR's files) and no `process`
// (with one, the Emscripten loader refuses to run outside Node builds). The bundle takes its message port
// through self.onmessage, as the UI hands it one; it announces nothing when the wasm module is ready, so one
// marker is set where it stores its request buffer (found by text; a bundle without it fails loudly).
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');

const dir = process.argv[2];
if (!dir) {
  process.stderr.write('usage: node engine.js DIR (a Perfetto UI build holding engine_bundle.js)\n');
  process.exit(2);
}
const readFile = (url) => fs.readFileSync(path.join(dir, path.basename(String(url))));
const log = (...a) => process.stderr.write(a.join(' ') + '\n');

const worker = {
  console: {log, warn: log, error: log, info: log, debug: () => {}},
  setTimeout, clearTimeout, setInterval, clearInterval, queueMicrotask, performance, TextDecoder, TextEncoder,
  URL, Response, crypto: globalThis.crypto || require('crypto').webcrypto,  // Node 18 has no global crypto
  WorkerGlobalScope: function WorkerGlobalScope() {},
  location: {href: 'file:///perfetto/engine_bundle.js', protocol: 'file:', host: ''},
  fetch: async (url) => new Response(readFile(url), {headers: {'Content-Type': 'application/wasm'}}),
  XMLHttpRequest: class {
    open(method, url) { this.url = url; }
    overrideMimeType() {}
    setRequestHeader() {}
    send() {
      const b = readFile(this.url);
      this.response = b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
      this.status = 200;
    }
  },
};
worker.self = worker;
vm.createContext(worker);

const READY = 'this.reqBufferAddr=this.wasmPtrCast(';
let source = fs.readFileSync(path.join(dir, 'engine_bundle.js'), 'utf8');
if (!source.includes(READY)) {
  log(`engine.js: ${dir}/engine_bundle.js has no "${READY}": not the Perfetto UI build this shim knows`);
  process.exit(3);
}
source = source.replace(READY, 'self.__refdeployReady=1,' + READY);
vm.runInContext(source, worker, {filename: 'engine_bundle.js'});

// The bundle checks `data instanceof Uint8Array` against its own context's Uint8Array.
const WorkerUint8Array = vm.runInContext('Uint8Array', worker);
const port = {onmessage: null, postMessage: (bytes) => process.stdout.write(bytes)};
const pending = [];
let ended = false;
process.stdin.on('data', (d) => pending.push(new WorkerUint8Array(d)));
process.stdin.on('end', () => { ended = true; });
const pump = () => {
  if (worker.__refdeployReady) {
    while (pending.length) port.onmessage({data: pending.shift()});
    if (ended) return process.stdout.end(() => process.exit(0));
  }
  setTimeout(pump, 1);
};
worker.onmessage({data: port});
pump();
