// The login page. A console link libos serve printed carries the token in
// its fragment (#token=...), which the browser never sends to a server nor
// writes in a referrer: the page takes it out of the address bar and the
// history, and logs in with it at once by posting the form, so the token
// reaches the server only in a request body and the session lives in the
// HttpOnly cookie, out of reach of the page's scripts.
"use strict";

(function () {
  const m = location.hash.match(/^#token=(.+)$/);
  if (!m) return;
  history.replaceState(null, "", location.pathname + location.search);
  let token = m[1];
  try { token = decodeURIComponent(token); } catch (e) { /* used as written */ }
  const form = document.querySelector("form.login-form");
  form.elements.token.value = token;
  form.submit();
})();
