// Package jsrunner runs the `javascript` runner of a skill package: an ES
// module whose selected export is called with the resolved inputs and a
// frozen {environment} context and returns a JSON-compatible value.
//
// # Module graph
//
// The entry module and everything it imports are bundled with esbuild into
// one script. A resolver plugin admits only static imports of relative .mjs,
// .js or .json paths that stay inside the package folder (checked through an
// os.Root, so a symbolic link cannot lead out); bare specifiers, node:
// built-ins, URLs, absolute paths, ".." escapes, dynamic import() and
// require() are refused as module_rejected before anything runs. The bundle
// is a script whose function scope is the module scope, evaluated afresh
// for every call. Bundles are cached by the content hash of the module
// graph; a cached bundle is served only while every file of its graph is
// unchanged: on Linux inotify reports any change to a graph file or a
// directory its path runs through, so an unchanged graph is served without a
// stat (see graphWatch), and otherwise every file's stamp is checked (see
// graphUnchanged).
//
// # Isolation
//
// Modules run in worker processes: the running executable started again
// with worker arguments and an empty environment, which MaybeRunWorker turns
// into a worker. A worker sets its own limits before it accepts a module (no core
// dumps, no file writes, an address-space limit relative to its size at
// start) and runs each call in a fresh goja runtime (built between calls;
// the only module code that may have run in it is the evaluation of the
// call's own module, ahead of a call of the bundle the calls before it ran)
// with a wall-time interrupt, a call-depth
// limit and a heap watchdog (one timer per worker, re-armed by each call),
// so an infinite loop, runaway recursion or an allocation bomb ends that
// call with resource_limit and nothing leaks into the next call. What the interpreter
// cannot interrupt (a built-in that loops or allocates natively) ends the
// worker instead: the host kills a worker that overstays its wall limit by
// more than a second, classifies a worker that dies of memory or stack
// exhaustion as resource_limit, and starts a replacement. The host process
// itself never runs module code, which is why this design was chosen over
// in-process goja: a goroutine cannot be stopped, and one huge allocation
// would exhaust the host.
//
// A module sees no host: no filesystem, network, timers, process, require,
// fetch or console; Math.random throws; Date reads FixedClock
// (the epoch: Date.now() is 0, as in runx) in UTC; promise reactions
// (then, catch, finally and await) are bounded (MaxPromiseJobs); code parsed at run time (eval, Function)
// cannot make the engine read source maps from disk. A module is therefore
// deterministic.
//
// # Limits
//
// Wall time per call: 2 s by default, 1..30 s when declared. Inputs and
// output: 4 MiB each; each module source file: 4 MiB; heap: 64 MiB by
// default, as in runx. The result must be JSON-compatible: undefined (also as
// a property or array element), BigInt, functions, symbols, cycles,
// non-finite numbers, array holes and built-in objects such as Map or Date
// are output_rejected, naming where in the result they are.
//
// # Paged artifacts
//
// With Spec.Pages the input named by PathFrom holds a path, resolved in
// runx's scope named by the PathScopeFrom input: "skill" (the package
// folder) or "workspace" (the default); every escape is refused. The file
// (at most 512 MiB) is copied into an unlinked private snapshot while it is
// hashed, so later changes to it cannot change a page. The snapshot (a JSON
// array, or one assigned by a JavaScript prefix such as
// "window.YTD.tweets.part0 = [", as in Twitter's archive) is framed into
// pages of complete JSON-array records (page_bytes, default 1 MiB, at most 4 MiB,
// fewer when the inputs and state would push a call past 4 MiB) and the
// export is called once per page with the inputs (path fields removed) plus
// runx_page: artifact_ref, media_type, whole_digest, artifact_bytes,
// page_index, offset, length, next_offset (artifact_bytes after the last
// page), eof, range_digest (of bytes [offset, offset+length)), records (each
// record's encoded JSON text as a string, which the module JSON.parses, as
// in runx) and state (null on the first page). A non-final call must
// return exactly {runx_page: {state, done?}}; done: true or the eof page ends the run, and
// that call's result without runx_page is the output. State is at most
// 2 MiB and a run at most 4,096 pages; each call has the spec's wall limit.
// A failure names the page index and its byte offset. artifact_ref is keyed
// by a per-pool secret, so it differs between pools while whole_digest and
// the output do not.
package jsrunner
