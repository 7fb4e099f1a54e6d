import { helper } from "./lib/util.mjs";
export default () => ({ helper });
