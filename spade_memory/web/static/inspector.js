// The memory inspector's page behaviour: ask before forgetting, and follow maintenance
// while a job runs. Forms work without it.
"use strict";
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form.classList && form.classList.contains("forget") && !form.dataset.confirmed) {
    if (!window.confirm("Forget this memory? It cannot be restored.")) {
      event.preventDefault();
    }
  }
});

const state = document.getElementById("maintenance-state");
if (state && ["checking", "repairing", "rebuilding", "working"].includes(state.textContent)) {
  window.setTimeout(() => window.location.reload(), 2000);
}
