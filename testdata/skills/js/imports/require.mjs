const m = require("./ok.mjs");
export default () => ({ ok: m.ok });
