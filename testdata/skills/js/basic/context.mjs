const HOST_NAMES = [
  "process", "require", "module", "exports", "fetch", "XMLHttpRequest", "WebSocket",
  "setTimeout", "setInterval", "setImmediate", "clearTimeout", "queueMicrotask",
  "Deno", "Bun", "console", "__filename", "__dirname",
];

// Reports what a module can see of its context and of the host.
export default function inspect(inputs, context) {
  const report = {
    argumentCount: arguments.length,
    contextFrozen: Object.isFrozen(context),
    environmentFrozen: Object.isFrozen(context.environment),
    contextKeys: Object.keys(context),
    environment: { ...context.environment },
    inputs,
  };
  try {
    context.environment.INJECTED = "x";
    report.environmentWrite = "allowed";
  } catch (e) {
    report.environmentWrite = e.name;
  }
  try {
    context.extra = 1;
    report.contextWrite = "allowed";
  } catch (e) {
    report.contextWrite = e.name;
  }
  report.hostGlobals = {};
  for (const name of HOST_NAMES) {
    report.hostGlobals[name] = typeof globalThis[name];
  }
  return report;
}

// State left on the global object must not reach the next call.
export function leaky() {
  const before = globalThis.__counter ?? 0;
  globalThis.__counter = before + 1;
  return { before };
}
