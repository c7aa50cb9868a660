// The memory inspector's page behaviour: ask before forgetting. Forms work without it.
"use strict";
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form.classList && form.classList.contains("forget") && !form.dataset.confirmed) {
    if (!window.confirm("Forget this memory? It cannot be restored.")) {
      event.preventDefault();
    }
  }
});
