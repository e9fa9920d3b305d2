// Progressive enhancement only: every form works without this file.
// A form with data-confirm (cancel a reward, reject an order, remove a member, revoke a key,
// delete an invoice, generate a new link) asks first; dismissing the question sends nothing.
// A submit button with data-busy shows that text and is disabled while the request runs
// (placing an order of 5,000 rewards takes a few seconds), and a .progress element in the
// same form announces it to screen readers.
document.addEventListener("submit", function (event) {
  var form = event.target;
  if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
    return;
  }
  var button = event.submitter || form.querySelector("button[data-busy]");
  if (!button || !button.dataset.busy) return;
  window.setTimeout(function () { button.disabled = true; }, 0);  // after the browser read the form
  button.textContent = button.dataset.busy;
  var progress = form.querySelector(".progress");
  if (progress) {
    var started = Date.now();
    progress.textContent = button.dataset.busy;
    window.setInterval(function () {
      progress.textContent = button.dataset.busy + " " + Math.round((Date.now() - started) / 1000) + " s";
    }, 1000);
  }
});

// Campaign editor: refresh the two previews from what is typed, half a second after typing stops.
(function () {
  var form = document.getElementById("campaign-form");
  if (!form) return;
  var frames = [["preview-email", "/dashboard/campaigns/preview/email?"], ["preview-page", "/dashboard/campaigns/preview/page?"]];
  var timer = null;
  function refresh() {
    var params = new URLSearchParams();
    new FormData(form).forEach(function (value, key) {
      if (key === "products" || key.indexOf("page_") === 0 || key.indexOf("email_") === 0) {
        if (String(value).trim()) params.append(key, value);
      }
    });
    frames.forEach(function (pair) {
      var frame = document.getElementById(pair[0]);
      if (frame) frame.src = pair[1] + params.toString();
    });
  }
  form.addEventListener("input", function () { window.clearTimeout(timer); timer = window.setTimeout(refresh, 500); });
  form.addEventListener("change", function () { window.clearTimeout(timer); timer = window.setTimeout(refresh, 200); });
})();
