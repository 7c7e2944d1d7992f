// mongosched dashboard: optional. Pages work without it; with it, the overview and the
// runners page can refresh themselves every 10 s (remembered in this browser); a running
// job's page does unless turned off.
(function () {
  "use strict";
  var page = document.body.getAttribute("data-refresh");
  var slot = document.querySelector(".account");
  if (!page || !slot || !window.localStorage) { return; }
  var key = "mongosched.refresh";
  var label = document.createElement("label");
  label.className = "refresh";
  var box = document.createElement("input");
  box.type = "checkbox";
  // A running job's page refreshes unless the reader turned refreshing off.
  var stored = localStorage.getItem(key);
  box.checked = stored === "1" || (stored === null && page === "running");
  label.appendChild(box);
  label.appendChild(document.createTextNode("Auto-refresh"));
  slot.insertBefore(label, slot.firstChild);
  var timer = null;
  function arm() {
    if (timer) { clearTimeout(timer); timer = null; }
    if (box.checked) { timer = setTimeout(function () { location.reload(); }, 10000); }
  }
  box.addEventListener("change", function () {
    localStorage.setItem(key, box.checked ? "1" : "0");
    arm();
  });
  arm();
})();
