// Outside the imports package on purpose: importing it must be refused.
export const secret = "outside";
