/*
 * `supervise doctor STATE [--spares] [--json] [--timeout S]`: the node
 * doctor on demand, against a running run; and
 * `supervise doctor --hosts H1,H2,... [--drain] RUN.yaml`: on a list of
 * hosts with no run (below, hosts_main).
 *
 * Reads the running supervisor's HTTP address and key from STATE
 * (http.addr, http.token: only their owner reads the key), POSTs /doctor
 * (the cleared nodes check themselves again: idle spares at once, the
 * gang's nodes on a thread beside their training), then follows /status
 * until every asked node has a verdict again, and prints one line per node.
 * A node that fails is refused as at admission: quarantined (drained under
 * Slurm), a spare takes its place.
 *
 * Exit: 0 every node asked passed; 1 a node was refused; 2 usage, or the
 * doctor is off in this run; 3 no supervisor runs on STATE; 4 the verdicts
 * did not all come within --timeout (--hosts: a host gave no report); 5
 * (--hosts) hosts of one platform disagree with no majority.
 *
 * --hosts runs `worker --doctor --json --node I` on each host at once
 * through the run file's launcher (local, ssh, slurm), reads the report
 * from each one's output and judges the compute hashes per platform as
 * sup_doctor.c does (a majority of two or more, more than any other hash);
 * --drain drains each refused host under Slurm (scontrol).
 */
#include "sup_int.h"

#include "ft_clock.h"
#include "ft_err.h"
#include "sup_launch.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *jstr(const cJSON *o, const char *k) {
  return cJSON_GetStringValue(cJSON_GetObjectItem(o, k));
}

static void usage(FILE *f) {
  fputs("usage: supervise doctor STATE_DIR [--spares] [--json] [--timeout S]\n"
        "       supervise doctor --hosts H1,H2,... [--drain] [--json] [--timeout S]\n"
        "                        [--worker PATH] [--set KEY=VALUE]... RUN.yaml\n"
        "  Has the nodes of the run supervised on STATE_DIR run the node doctor again\n"
        "  now (compute, memory and disk checks; docs/design.md \"The node doctor\"):\n"
        "  idle spares at once, the gang's nodes on a thread beside their training.\n"
        "  Waits for the verdicts and prints one line per node. A node that fails is\n"
        "  refused as at admission: quarantined (drained under Slurm when\n"
        "  recovery.drain is on) and a spare takes its place.\n"
        "  The request carries the key the supervisor wrote to STATE_DIR/http.token\n"
        "  (readable by its owner only).\n"
        "  --spares     only the idle spares (the gang trains undisturbed)\n"
        "  --json       one JSON object: {\"nodes\": [{node, host, role, doctor,\n"
        "               verdict}], \"passed\": N, \"refused\": N}\n"
        "  --timeout S  how long to wait for the verdicts (default 120)\n"
        "With --hosts, no run is needed: `worker --doctor --json` runs on every host\n"
        "  at once through the run file's launcher (local, ssh: nodes.command, slurm:\n"
        "  srun --nodelist), and the compute hashes are compared per platform as the\n"
        "  supervisor does: a host whose hash differs from the one a majority (two or\n"
        "  more, more than any other) agrees on, or that fails its own memory or disk\n"
        "  check, is refused; a platform with one host is unverified; hosts that\n"
        "  disagree with no majority are undetermined (nobody refused).\n"
        "  --drain      under Slurm, drain each refused host (scontrol, reason \"ftsup\n"
        "               doctor: ...\"), as a run's quarantine does\n"
        "  --worker P   the worker program (default: the one beside supervise)\n"
        "Exit: 0 every node asked passed, 1 a node was refused, 2 usage or the doctor\n"
        "is off in this run, 3 no supervisor runs on STATE_DIR, 4 timed out (with\n"
        "--hosts: a host gave no report), 5 (--hosts) hosts disagree with no majority.\n"
        "Examples:\n"
        "  supervise doctor /tmp/s1           # while `supervise --state /tmp/s1 ...` runs\n"
        "  supervise doctor --hosts h1,h2,h3 --drain run.yaml   # before a run, under Slurm\n",
        f);
}

/* 1 while node x of a /status "nodes" entry waits for its verdict */
static int waiting(const cJSON *x) {
  const char *d = jstr(x, "doctor"), *role = jstr(x, "role");
  if (role && (!strcmp(role, "quarantined") || !strcmp(role, "lost")))
    return 0;
  return d && (!strcmp(d, "checking") || !strcmp(d, "comparing") || !strcmp(d, "pending"));
}

static const cJSON *node_in(const cJSON *status, int n) {
  const cJSON *x;
  cJSON_ArrayForEach(x, cJSON_GetObjectItem(status, "nodes")) {
    if ((int)cJSON_GetNumberValue(cJSON_GetObjectItem(x, "node")) == n)
      return x;
  }
  return NULL;
}

/* --json's one line (when json), then out is freed. */
static void print_and_free(cJSON *out, int json) {
  if (json) {
    char *t = cJSON_PrintUnformatted(out);
    printf("%s\n", t ? t : "{}");
    free(t);
  }
  cJSON_Delete(out);
}

/* ---- --hosts: the doctor on a list of hosts, no run --------------------------- */

#define MAX_HOSTS 256

typedef struct host_rep {
  const char *host;
  pid_t pid;
  int status;     /* waitpid's; -1 still running */
  char log[4200]; /* its stdout and stderr */
  cJSON *r;       /* the report, or NULL */
  const char *plat, *hash;
  int own_fail, storage;
  const char *verdict; /* passed, refused, unverified, undetermined, no report */
  char why[400];
} host_rep;

/* The report a host's log holds: the last line with a JSON object (srun
 * --label puts "0: " before it). */
static cJSON *report_in(const char *path) {
  FILE *fp = fopen(path, "r");
  if (!fp)
    return NULL;
  cJSON *r = NULL;
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, fp) > 0) {
    char *b = strchr(line, '{');
    cJSON *x = b ? cJSON_Parse(b) : NULL;
    if (x && cJSON_GetObjectItem(x, "checks")) {
      cJSON_Delete(r);
      r = x;
    } else
      cJSON_Delete(x);
  }
  free(line);
  fclose(fp);
  return r;
}

static void read_report(host_rep *h) {
  h->r = report_in(h->log);
  if (!h->r)
    return;
  h->plat = jstr(h->r, "platform");
  const cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(h->r, "checks")) {
    const char *name = jstr(c, "name"), *bl = jstr(c, "blame"), *det = jstr(c, "detail");
    if (name && !strcmp(name, "compute"))
      h->hash = jstr(c, "hash");
    if (cJSON_IsTrue(cJSON_GetObjectItem(c, "ok")))
      continue;
    if (bl && !strcmp(bl, "storage"))
      h->storage = 1;
    else if (!h->own_fail) {
      h->own_fail = 1;
      snprintf(h->why, sizeof h->why, "%s check: %s", name ? name : "a", det ? det : "failed");
    }
  }
}

/* The verdicts, per platform as the supervisor judges (sup_doctor.c). */
static void judge_hosts(host_rep *h, int n) {
  for (int i = 0; i < n; i++) {
    if (h[i].verdict)
      continue;
    if (!h[i].r || !h[i].plat || !h[i].hash) {
      h[i].verdict = "no report";
      int st = h[i].status;
      snprintf(h[i].why, sizeof h[i].why, "%s (see %s)",
               st < 0          ? "timed out"
               : WIFEXITED(st) ? "no doctor's report in its output"
                               : "killed",
               h[i].log);
      continue;
    }
    int cnt = 0, best = 0, second = 0; /* i's platform: hosts; the top two hash counts */
    const char *ref = NULL;
    for (int j = 0; j < n; j++) {
      if (!h[j].plat || !h[j].hash || strcmp(h[j].plat, h[i].plat) != 0)
        continue;
      cnt++;
      if (ref && !strcmp(ref, h[j].hash))
        continue;
      int k = 0;
      for (int m = 0; m < n; m++)
        k += h[m].plat && h[m].hash && !strcmp(h[m].plat, h[i].plat) &&
             !strcmp(h[m].hash, h[j].hash);
      if (k > best) {
        second = best > second ? best : second;
        best = k;
        ref = h[j].hash;
      } else if (k > second)
        second = k;
    }
    if (h[i].own_fail)
      h[i].verdict = "refused";
    else if (cnt == 1)
      h[i].verdict = "unverified";
    else if (!(best >= 2 && best > second))
      h[i].verdict = "undetermined";
    else if (strcmp(h[i].hash, ref) != 0) {
      h[i].verdict = "refused";
      snprintf(h[i].why, sizeof h[i].why,
               "compute check: its result (hash %.16s...) differs from the one %d hosts of its "
               "platform agree on (%.16s...): it computes wrong numbers",
               h[i].hash, best, ref);
    } else
      h[i].verdict = "passed";
  }
}

static int spawn_host(const ft_runfile *rf, const char *worker, const char *runfile,
                      const char *const *sets, int nsets, int idx, host_rep *h) {
  char num[16];
  snprintf(num, sizeof num, "%d", idx);
  int na = 0;
  char **argv = calloc((size_t)(8 + 2 * nsets), sizeof *argv);
  if (!argv)
    return ft_err_set(FT_ENOMEM, "out of memory");
  const char *words[] = {worker, "--doctor", "--json", "--node", num};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    argv[na++] = strdup(words[i]);
  for (int i = 0; i < nsets; i++) {
    argv[na++] = strdup("--set");
    argv[na++] = strdup(sets[i]);
  }
  argv[na++] = strdup(runfile);
  char **srun = NULL, *cmd = NULL;
  int rc = sup_abs_worker(argv);
  if (!rc && rf->nodes.launcher == FT_RF_LAUNCHER_SLURM) {
    char cwd[PATH_MAX];
    const char *wd = rf->nodes.workdir[0] ? rf->nodes.workdir : getcwd(cwd, sizeof cwd);
    sup_srun_args sa = {.host = h->host,
                        .ntasks = 1,
                        .workdir = wd ? wd : "/",
                        .name = "ftsup.doctor",
                        .extra = rf->nodes.srun_args};
    if (!(srun = sup_srun_argv(&sa, argv)))
      rc = ft_err_set(FT_ENOMEM, "out of memory");
  } else if (!rc && rf->nodes.launcher == FT_RF_LAUNCHER_SSH) {
    rc = sup_ssh_launch_command(rf->nodes.command, h->host, rf->nodes.workdir, argv, &cmd);
  } else if (!rc && rf->nodes.launcher != FT_RF_LAUNCHER_LOCAL) {
    rc = ft_err_set(FT_EINVAL, "nodes.launcher %s: --hosts runs on local, ssh or slurm",
                    ft_rf_launcher_name(rf->nodes.launcher));
  }
  if (!rc) {
    sup_spawn sp = {.argv = srun ? srun : argv, .cmd = cmd, .log_path = h->log};
    rc = sup_launch_spawn(&sp, &h->pid);
  }
  sup_argv_free(argv);
  sup_argv_free(srun);
  free(cmd);
  return rc;
}

/* scontrol update NodeName=host State=DRAIN Reason=...: 0 when it worked. */
static int drain(const char *host, const char *why) {
  char reason[300], node[160];
  snprintf(reason, sizeof reason, "Reason=ftsup doctor: %.200s", why);
  snprintf(node, sizeof node, "NodeName=%s", host);
  pid_t pid = fork();
  if (pid == 0) {
    execlp("scontrol", "scontrol", "update", node, "State=DRAIN", reason, (char *)NULL);
    _exit(127);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) < 0)
    return -1;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int hosts_main(const char *hosts, const char *runfile, const char *worker_arg,
                      const char *const *sets, int nsets, int json, int drain_on, double timeout) {
  static ft_runfile rf;
  char err[1024];
  if (ft_runfile_load(runfile, &rf, err, sizeof err)) {
    fprintf(stderr, "supervise doctor: %s\n", err);
    return 2;
  }
  for (int i = 0; i < nsets; i++) {
    const char *eq = strchr(sets[i], '=');
    char key[256];
    snprintf(key, sizeof key, "%.*s", eq ? (int)(eq - sets[i]) : 0, sets[i]);
    if (!eq || ft_runfile_set(&rf, key, eq + 1, err, sizeof err)) {
      fprintf(stderr, "supervise doctor: --set %s: %s\n", sets[i], eq ? err : "want KEY=VALUE");
      return 2;
    }
  }
  if (ft_runfile_validate(&rf, err, sizeof err)) { /* across keys: after the --set */
    fprintf(stderr, "supervise doctor: %s\n", err);
    return 2;
  }
  char worker[PATH_MAX], dirbuf[PATH_MAX];
  if (worker_arg)
    snprintf(worker, sizeof worker, "%s", worker_arg);
  else
    sup_default_worker(worker, sizeof worker);
  const char *td = getenv("TMPDIR");
  snprintf(dirbuf, sizeof dirbuf, "%s/ftsup-doctor.XXXXXX", td && *td ? td : "/tmp");
  static host_rep h[MAX_HOSTS];
  static char list[8192];
  snprintf(list, sizeof list, "%s", hosts);
  int n = 0;
  for (char *save = NULL, *t = strtok_r(list, ",", &save); t && n < MAX_HOSTS;
       t = strtok_r(NULL, ",", &save))
    if (*t)
      h[n++] = (host_rep){.host = t, .status = -1};
  if (!n) {
    fprintf(stderr, "supervise doctor: --hosts: no host named\n");
    return 2;
  }
  const char *tmp = mkdtemp(dirbuf);
  if (!tmp) {
    fprintf(stderr, "supervise doctor: cannot make a folder for the hosts' output\n");
    return 2;
  }
  if (!json)
    fprintf(stderr, "supervise doctor: %d host%s checking (%s launcher)\n", n, n == 1 ? "" : "s",
            ft_rf_launcher_name(rf.nodes.launcher));
  for (int i = 0; i < n; i++) {
    snprintf(h[i].log, sizeof h[i].log, "%s/%s.log", tmp, h[i].host);
    if (spawn_host(&rf, worker, runfile, sets, nsets, i, &h[i])) {
      fprintf(stderr, "supervise doctor: %s: %s\n", h[i].host, ft_err_detail());
      h[i].pid = 0;
      h[i].status = 0;
    }
  }
  double t0 = ft_now_s();
  for (int left = n; left;) {
    left = 0;
    for (int i = 0; i < n; i++) {
      if (h[i].pid <= 0 || h[i].status >= 0)
        continue;
      int st;
      if (waitpid(h[i].pid, &st, WNOHANG) == h[i].pid)
        h[i].status = st;
      else
        left++;
    }
    if (left && ft_now_s() - t0 > timeout) {
      for (int i = 0; i < n; i++)
        if (h[i].pid > 0 && h[i].status < 0) {
          kill(-h[i].pid, SIGKILL);
          waitpid(h[i].pid, NULL, 0);
        }
      break;
    }
    if (left)
      usleep(50 * 1000);
  }
  for (int i = 0; i < n; i++)
    read_report(&h[i]);
  judge_hosts(h, n);
  int refused = 0, missing = 0, undetermined = 0;
  cJSON *out = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(out, "hosts");
  for (int i = 0; i < n; i++) {
    int bad = !strcmp(h[i].verdict, "refused");
    refused += bad;
    missing += !strcmp(h[i].verdict, "no report");
    undetermined += !strcmp(h[i].verdict, "undetermined");
    int drained =
        bad && drain_on && rf.nodes.launcher == FT_RF_LAUNCHER_SLURM && !drain(h[i].host, h[i].why);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "host", h[i].host);
    cJSON_AddStringToObject(e, "verdict", h[i].verdict);
    if (h[i].why[0])
      cJSON_AddStringToObject(e, "reason", h[i].why);
    if (h[i].plat)
      cJSON_AddStringToObject(e, "platform", h[i].plat);
    if (h[i].hash)
      cJSON_AddStringToObject(e, "hash", h[i].hash);
    if (h[i].storage)
      cJSON_AddBoolToObject(e, "storage_unusable", 1);
    if (bad && drain_on)
      cJSON_AddBoolToObject(e, "drained", drained);
    if (h[i].r)
      cJSON_AddItemToObject(e, "report", h[i].r);
    cJSON_AddItemToArray(arr, e);
    if (!json)
      printf("%-16s %-12s%s%s%s%s\n", h[i].host, h[i].verdict, h[i].why[0] ? " " : "", h[i].why,
             h[i].storage ? " (its disk check's folder is unusable: the storage's)" : "",
             drained ? " -> drained" : "");
  }
  cJSON_AddNumberToObject(out, "refused", refused);
  print_and_free(out, json);
  for (int i = 0; i < n; i++)
    unlink(h[i].log);
  rmdir(tmp);
  return refused ? 1 : missing ? 4 : undetermined ? 5 : 0;
}

int sup_doctor_main(int argc, char **argv) {
  const char *dir = NULL, *hosts = NULL, *worker = NULL;
  const char *sets[64];
  int json = 0, spares = 0, drain_on = 0, nsets = 0;
  double timeout = 120;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (!strcmp(argv[i], "--spares"))
      spares = 1;
    else if (!strcmp(argv[i], "--drain"))
      drain_on = 1;
    else if (!strcmp(argv[i], "--hosts") && i + 1 < argc)
      hosts = argv[++i];
    else if (!strcmp(argv[i], "--worker") && i + 1 < argc)
      worker = argv[++i];
    else if (!strcmp(argv[i], "--set") && i + 1 < argc && nsets < 64)
      sets[nsets++] = argv[++i];
    else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
      char *end;
      timeout = strtod(argv[++i], &end);
      if (*end || !(timeout > 0)) {
        fprintf(stderr, "supervise doctor: --timeout %s: want seconds > 0\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if (argv[i][0] == '-' || dir) {
      fprintf(stderr, "supervise doctor: unexpected '%s' (supervise doctor --help)\n", argv[i]);
      return 2;
    } else
      dir = argv[i];
  }
  if (hosts) {
    if (!dir) {
      fprintf(stderr, "supervise doctor: --hosts needs the run file (supervise doctor --help)\n");
      return 2;
    }
    return hosts_main(hosts, dir, worker, sets, nsets, json, drain_on, timeout);
  }
  if (!dir) {
    fprintf(stderr, "supervise doctor: which state directory? (supervise doctor --help)\n");
    return 2;
  }
  char addr[340], key[128];
  if (sup_http_state_file(dir, "http.addr", addr, sizeof addr) ||
      sup_http_state_file(dir, "http.token", key, sizeof key)) {
    fprintf(stderr,
            "supervise doctor: %s: no supervisor runs there (no http.addr and http.token; "
            "a run started with --http off cannot be asked)\n",
            dir);
    return 3;
  }
  int code;
  char *body = sup_http_call(addr, 1, spares ? "/doctor?spares=1" : "/doctor", key, &code);
  cJSON *r = code == 200 && body ? cJSON_Parse(body) : NULL;
  if (!r) {
    if (code == 0)
      fprintf(stderr, "supervise doctor: %s: nobody answers on %s (the run has ended?)\n", dir,
              addr);
    else
      fprintf(stderr, "supervise doctor: %s answered %d: %s", addr, code, body ? body : "\n");
    free(body);
    return code == 0 ? 3 : 2;
  }
  free(body);
  if (jstr(r, "error")) {
    fprintf(stderr, "supervise doctor: %s\n", jstr(r, "error"));
    cJSON_Delete(r);
    return 2;
  }
  int asked[SUP_MAX_NODES], na = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(r, "asked")) {
    if (na < SUP_MAX_NODES)
      asked[na++] = (int)cJSON_GetNumberValue(it);
  }
  cJSON_Delete(r);
  if (!json)
    fprintf(stderr, "supervise doctor: %d node%s checking%s\n", na, na == 1 ? "" : "s",
            na ? "; waiting for the verdicts" : " (none was cleared and connected)");
  cJSON *st = NULL;
  double t0 = ft_now_s();
  int left = na;
  while (left) {
    cJSON_Delete(st);
    body = sup_http_call(addr, 0, "/status", NULL, &code);
    st = code == 200 && body ? cJSON_Parse(body) : NULL;
    free(body);
    if (!st) {
      fprintf(stderr, "supervise doctor: the supervisor stopped answering on %s\n", addr);
      return 3;
    }
    left = 0;
    for (int i = 0; i < na; i++) {
      const cJSON *x = node_in(st, asked[i]);
      left += x && waiting(x);
    }
    if (!left)
      break;
    if (ft_now_s() - t0 > timeout) {
      fprintf(stderr, "supervise doctor: %d of %d verdicts missing after %.0f s\n", left, na,
              timeout);
      break;
    }
    usleep(200 * 1000);
  }
  int passed = 0, refused = 0;
  cJSON *out = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(out, "nodes");
  for (int i = 0; i < na; i++) {
    const cJSON *x = st ? node_in(st, asked[i]) : NULL;
    const char *d = x ? jstr(x, "doctor") : NULL, *v = x ? jstr(x, "doctor_verdict") : NULL;
    const char *role = x ? jstr(x, "role") : NULL, *host = x ? jstr(x, "host") : NULL;
    int bad = d && !strcmp(d, "refused");
    int ok = d && !strcmp(d, "cleared");
    passed += ok;
    refused += bad;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "node", asked[i]);
    if (host)
      cJSON_AddStringToObject(e, "host", host);
    cJSON_AddStringToObject(e, "role", role ? role : "?");
    cJSON_AddStringToObject(e, "doctor", d ? d : "?");
    cJSON_AddStringToObject(e, "verdict", v ? v : "");
    cJSON_AddItemToArray(arr, e);
    if (!json)
      printf("node %d%s%s (%s): %s\n", asked[i], host ? " on " : "", host ? host : "",
             role ? role : "?",
             bad  ? (v ? v : "refused")
             : ok ? (v ? v : "passed")
                  : "no verdict yet");
  }
  cJSON_AddNumberToObject(out, "passed", passed);
  cJSON_AddNumberToObject(out, "refused", refused);
  print_and_free(out, json);
  cJSON_Delete(st);
  return refused ? 1 : left ? 4 : 0;
}
