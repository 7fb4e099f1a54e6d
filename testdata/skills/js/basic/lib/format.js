export const label = (s) => `[${s}]`;
