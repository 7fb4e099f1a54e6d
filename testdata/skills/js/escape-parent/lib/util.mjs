// The escape sits one level down the graph, so only a walk of the whole
// graph finds it.
import { secret } from "../../outside.mjs";
export const helper = secret;
