export { ok } from "../ok.mjs";
