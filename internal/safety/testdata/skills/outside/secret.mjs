// Not a skill package: a file beside the packages that a hostile module
// tries to import from outside its own package.
export const secret = "canary-outside-package-4d1e";
