export const ok = "ok";
