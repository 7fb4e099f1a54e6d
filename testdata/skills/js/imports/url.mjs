import { x } from "https://example.com/x.mjs";
export default () => ({ x });
