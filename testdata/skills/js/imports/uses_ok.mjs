import { ok } from "./ok.mjs";
export default () => ({ ok });
