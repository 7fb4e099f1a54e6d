import { readFileSync } from "node:fs";
export default () => ({ read: typeof readFileSync });
