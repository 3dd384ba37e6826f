/*
 * `supervise doctor STATE [--spares] [--json] [--timeout S]`: the node
 * doctor on demand, against a running run.
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
 * did not all come within --timeout.
 */
#include "sup_int.h"

#include "ft_clock.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *jstr(const cJSON *o, const char *k) {
  return cJSON_GetStringValue(cJSON_GetObjectItem(o, k));
}

static void usage(FILE *f) {
  fputs("usage: supervise doctor STATE_DIR [--spares] [--json] [--timeout S]\n"
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
        "Exit: 0 every node asked passed, 1 a node was refused, 2 usage or the doctor\n"
        "is off in this run, 3 no supervisor runs on STATE_DIR, 4 timed out.\n"
        "Example:\n"
        "  supervise doctor /tmp/s1           # while `supervise --state /tmp/s1 ...` runs\n",
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

int sup_doctor_main(int argc, char **argv) {
  const char *dir = NULL;
  int json = 0, spares = 0;
  double timeout = 120;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (!strcmp(argv[i], "--spares"))
      spares = 1;
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
  if (json) {
    char *t = cJSON_PrintUnformatted(out);
    printf("%s\n", t ? t : "{}");
    free(t);
  }
  cJSON_Delete(out);
  cJSON_Delete(st);
  return refused ? 1 : left ? 4 : 0;
}
