// adctl's web page: #/ lists the jobs, #/jobs/<id> follows one, #/compare?jobs=a,b puts runs
// side by side (docs/web.md).
import "./style.css";

import { askToken } from "./api";
import { compareIds, showCompare } from "./compare_view";
import { showJob } from "./job_view";
import { showJobs, View } from "./jobs_view";

const app = document.getElementById("app") as HTMLElement;
const status = document.getElementById("status") as HTMLElement;
const setStatus = (text: string) => {
  status.textContent = text;
};

let current: View | null = null;

function route(): void {
  current?.stop();
  const match = /^#\/jobs\/([^/]+)$/.exec(location.hash);
  const compare = compareIds(location.hash);
  if (match) current = showJob(app, decodeURIComponent(match[1]), setStatus);
  else if (compare) current = showCompare(app, compare, setStatus);
  else current = showJobs(app, setStatus);
}

document.getElementById("token-button")?.addEventListener("click", () => {
  void askToken("Your adctl token (a viewer's reads, a submitter's can also cancel/pause/resume); kept in this browser.").then(
    (saved) => saved && route(),
  );
});
window.addEventListener("hashchange", route);
route();
