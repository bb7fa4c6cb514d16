// The console works without this script; it only adds conveniences.
// (No inline script anywhere: the Content-Security-Policy forbids it.)
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  // Ask before a destructive action: <form data-confirm="...">.
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (e) => {
      if (!window.confirm(form.dataset.confirm)) e.preventDefault();
    });
  }

  // "Select all" for the dead-letter list: <input data-select-all="name">.
  for (const all of document.querySelectorAll("input[data-select-all]")) {
    all.addEventListener("change", () => {
      for (const box of document.querySelectorAll(`input[name="${all.dataset.selectAll}"]`)) box.checked = all.checked;
    });
  }

  // Copy a secret shown once: <button data-copy="element-id">.
  for (const btn of document.querySelectorAll("button[data-copy]")) {
    btn.hidden = false;
    btn.addEventListener("click", async () => {
      const text = document.getElementById(btn.dataset.copy).textContent.trim();
      try {
        await navigator.clipboard.writeText(text);
        btn.textContent = "Copied";
      } catch {
        btn.textContent = "Select the text and copy it";
      }
    });
  }

  // Move focus to the problem summary after a refused form, so a screen
  // reader announces it and the keyboard starts there.
  const problem = document.getElementById("problem");
  if (problem) problem.focus();

  // Show or hide fields that depend on a choice: <fieldset data-when="name=value">.
  const dependents = document.querySelectorAll("[data-when]");
  const update = () => {
    for (const el of dependents) {
      const [name, value] = el.dataset.when.split("=");
      const chosen = document.querySelector(`input[name="${name}"]:checked`);
      const on = value === "on" ? !!chosen : chosen && chosen.value === value;
      el.hidden = !on;
    }
  };
  for (const input of document.querySelectorAll("input[type=radio], input[type=checkbox]")) input.addEventListener("change", update);
  update();
});
