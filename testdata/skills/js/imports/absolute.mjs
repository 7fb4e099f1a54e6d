import { x } from "/etc/x.mjs";
export default () => ({ x });
