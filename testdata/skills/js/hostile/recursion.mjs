function down(n) {
  return down(n + 1) + 1;
}
export default () => down(0);
