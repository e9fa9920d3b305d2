// Progressive enhancement for the redemption pages; everything works without it.
(function () {
  "use strict";
  // Copy buttons next to codes and PINs (hidden until this script runs).
  var status = document.querySelector(".copy-status");
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    button.hidden = false;
    button.addEventListener("click", function () {
      var target = document.getElementById(button.getAttribute("data-copy"));
      if (!target || !navigator.clipboard) { return; }
      navigator.clipboard.writeText(target.textContent.trim()).then(function () {
        var label = button.firstChild.nodeValue;
        button.firstChild.nodeValue = "Copied";
        if (status) { status.textContent = "Copied to the clipboard"; }
        setTimeout(function () { button.firstChild.nodeValue = label; }, 2000);
      });
    });
  });
  // One confirmation per click: disable the button while the choice is being sent.
  var form = document.querySelector("form[data-confirm-form]");
  if (form) {
    form.addEventListener("submit", function () {
      var submit = form.querySelector("button[type=submit]");
      if (submit) {
        setTimeout(function () { submit.disabled = true; submit.textContent = "Confirming…"; }, 0);
      }
    });
  }
})();
