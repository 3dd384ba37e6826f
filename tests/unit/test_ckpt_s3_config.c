/*
 * test_ckpt_s3_config: the S3 tier's pure parts, no server needed:
 * "s3://" URIs and the environment, the shared credentials file, object
 * URLs (path and virtual-host addressing), the bucket layout of keys, and
 * the one table that maps libcurl results and HTTP statuses to FT_E*.
 */
#include "ckpt_s3.h"
#include "ft_err.h"

#include <curl/curl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static void clear_env(void) {
  const char *v[] = {
      "FT_S3_ENDPOINT",    "AWS_REGION",    "AWS_DEFAULT_REGION",          "FT_S3_ADDRESSING",
      "FT_S3_CACHE",       "FT_S3_REQUIRE", "AWS_ACCESS_KEY_ID",           "AWS_SECRET_ACCESS_KEY",
      "AWS_SESSION_TOKEN", "AWS_PROFILE",   "AWS_SHARED_CREDENTIALS_FILE", "FT_S3_TIMEOUT_S"};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    unsetenv(v[i]);
  setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
  setenv("HOME", "/home/tester", 1);
}

static void set_keys(void) {
  setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "SECRETSECRETSECRET", 1);
}

static void test_defaults_are_aws(void **st) {
  clear_env();
  set_keys();
  ckpt_s3_config c;
  assert_int_equal(ckpt_s3_config_from_uri("s3://my-bucket/runs/a/", &c), FT_OK);
  assert_string_equal(c.bucket, "my-bucket");
  assert_string_equal(c.prefix, "runs/a");
  assert_string_equal(c.region, "us-east-1");
  assert_string_equal(c.endpoint, "https://s3.us-east-1.amazonaws.com");
  assert_int_equal(c.virtual_host, 1);
  assert_int_equal(c.require_both, 1);
  assert_string_equal(c.cache_dir, "/home/tester/.cache/ftsup/my-bucket/runs/a");
  assert_string_equal(c.access_key, "AKIDEXAMPLE");
  ckpt_s3_config_wipe(&c);
  assert_string_equal(c.secret_key, "");
}

static void test_endpoint_means_path_style(void **st) {
  clear_env();
  set_keys();
  setenv("FT_S3_ENDPOINT", "http://127.0.0.1:9000/", 1);
  setenv("AWS_DEFAULT_REGION", "eu-west-3", 1);
  setenv("FT_S3_CACHE", "/tmp/cachex", 1);
  setenv("FT_S3_REQUIRE", "local", 1);
  ckpt_s3_config c;
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt", &c), FT_OK);
  assert_string_equal(c.endpoint, "http://127.0.0.1:9000");
  assert_string_equal(c.region, "eu-west-3");
  assert_string_equal(c.prefix, "");
  assert_int_equal(c.virtual_host, 0);
  assert_int_equal(c.require_both, 0);
  assert_string_equal(c.cache_dir, "/tmp/cachex");
  setenv("FT_S3_ADDRESSING", "virtual", 1);
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_OK);
  assert_int_equal(c.virtual_host, 1);
}

static void test_bad_values_are_config_errors(void **st) {
  clear_env();
  set_keys();
  ckpt_s3_config c;
  assert_int_equal(ckpt_s3_config_from_uri("s3://Bad_Bucket/x", &c), FT_EINVAL);
  assert_int_equal(ckpt_s3_config_from_uri("s3://ok-bucket/a/../b", &c), FT_EINVAL);
  setenv("FT_S3_ADDRESSING", "sideways", 1);
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_ECONFIG);
  assert_non_null(strstr(ft_err_detail(), "FT_S3_ADDRESSING"));
  unsetenv("FT_S3_ADDRESSING");
  setenv("FT_S3_REQUIRE", "maybe", 1);
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_ECONFIG);
  unsetenv("FT_S3_REQUIRE");
  setenv("FT_S3_TIMEOUT_S", "0", 1);
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_ECONFIG);
  unsetenv("FT_S3_TIMEOUT_S");
  setenv("FT_S3_ENDPOINT", "127.0.0.1:9000", 1);
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_ECONFIG);
}

static void test_credentials_missing_names_where_to_put_them(void **st) {
  clear_env();
  ckpt_s3_config c;
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_ECONFIG);
  assert_non_null(strstr(ft_err_detail(), "AWS_ACCESS_KEY_ID"));
  setenv("AWS_ACCESS_KEY_ID", "AKIDONLY", 1);
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_ECONFIG);
  assert_null(strstr(ft_err_detail(), "AKIDONLY"));
}

static void test_shared_credentials_file(void **st) {
  clear_env();
  char path[] = "/tmp/test_s3_credsXXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char *text = "# comment\n[default]\naws_access_key_id = DEFAULTKEY\n"
                     "aws_secret_access_key=DEFAULTSECRET\n\n"
                     "[other]\naws_access_key_id=OTHERKEY\naws_secret_access_key = OTHERSECRET\n"
                     "aws_session_token = TOKEN123\n[broken]\naws_access_key_id=X\n";
  assert_int_equal(write(fd, text, strlen(text)), (int)strlen(text));
  close(fd);
  setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
  ckpt_s3_config c;
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_OK);
  assert_string_equal(c.access_key, "DEFAULTKEY");
  assert_string_equal(c.secret_key, "DEFAULTSECRET");
  assert_string_equal(c.session_token, "");
  setenv("AWS_PROFILE", "other", 1);
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_OK);
  assert_string_equal(c.access_key, "OTHERKEY");
  assert_string_equal(c.session_token, "TOKEN123");
  setenv("AWS_PROFILE", "broken", 1);
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_ECONFIG);
  setenv("AWS_PROFILE", "absent", 1);
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_ECONFIG);
  assert_non_null(strstr(ft_err_detail(), "absent"));
  /* the environment wins over the file */
  set_keys();
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_OK);
  assert_string_equal(c.access_key, "AKIDEXAMPLE");
  unlink(path);
}

static void test_urls(void **st) {
  ckpt_s3_config c;
  memset(&c, 0, sizeof c);
  snprintf(c.endpoint, sizeof c.endpoint, "http://127.0.0.1:9000");
  snprintf(c.bucket, sizeof c.bucket, "bkt");
  char u[1024];
  assert_int_equal(ckpt_s3_client_url(&c, "p/chunks/ab/abcd", NULL, u, sizeof u), FT_OK);
  assert_string_equal(u, "http://127.0.0.1:9000/bkt/p/chunks/ab/abcd");
  assert_int_equal(ckpt_s3_client_url(&c, "a b+c", "uploads=", u, sizeof u), FT_OK);
  assert_string_equal(u, "http://127.0.0.1:9000/bkt/a%20b%2Bc?uploads=");
  assert_int_equal(ckpt_s3_client_url(&c, "", "list-type=2&prefix=x", u, sizeof u), FT_OK);
  assert_string_equal(u, "http://127.0.0.1:9000/bkt?list-type=2&prefix=x");
  snprintf(c.endpoint, sizeof c.endpoint, "https://s3.eu-west-1.amazonaws.com");
  c.virtual_host = 1;
  assert_int_equal(ckpt_s3_client_url(&c, "k/x.json", NULL, u, sizeof u), FT_OK);
  assert_string_equal(u, "https://bkt.s3.eu-west-1.amazonaws.com/k/x.json");
}

static void test_layout_mirrors_local_tier(void **st) {
  ckpt_s3_config c;
  memset(&c, 0, sizeof c);
  char k[512];
  const char *hex = "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789";
  char key[128];
  snprintf(key, sizeof key, "chunks/%s", hex);
  snprintf(c.prefix, sizeof c.prefix, "runs/x");
  assert_int_equal(ckpt_tier_s3_object_key(&c, key, k, sizeof k), FT_OK);
  assert_string_equal(k, "runs/x/chunks/ab/abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
                         "0123456789");
  assert_int_equal(
      ckpt_tier_s3_object_key(&c, "manifests/r/00000000000000000007.json", k, sizeof k), FT_OK);
  assert_string_equal(k, "runs/x/manifests/r/00000000000000000007.json");
  c.prefix[0] = 0;
  assert_int_equal(ckpt_tier_s3_object_key(&c, "manifests/r/1.json", k, sizeof k), FT_OK);
  assert_string_equal(k, "manifests/r/1.json");
  assert_int_equal(ckpt_tier_s3_object_key(&c, "../etc", k, sizeof k), FT_EINVAL);
}

static void test_classify(void **st) {
  int r;
  assert_int_equal(ckpt_s3_client_classify(CURLE_OK, 200, &r), FT_OK);
  assert_int_equal(ckpt_s3_client_classify(CURLE_OK, 204, &r), FT_OK);
  assert_int_equal(ckpt_s3_client_classify(CURLE_OK, 404, &r), FT_ENOENT);
  assert_int_equal(r, 0);
  assert_int_equal(ckpt_s3_client_classify(CURLE_OK, 412, &r), FT_EEXIST);
  assert_int_equal(r, 0);
  assert_int_equal(ckpt_s3_client_classify(CURLE_OK, 403, &r), FT_ECONFIG);
  assert_int_equal(r, 0);
  assert_int_equal(ckpt_s3_client_classify(CURLE_OK, 400, &r), FT_EINVAL);
  assert_int_equal(r, 0);
  /* throttling and server errors are retried; other 4xx never */
  assert_int_equal(ckpt_s3_client_classify(CURLE_OK, 429, &r), FT_EBUSY);
  assert_int_equal(r, 1);
  assert_int_equal(ckpt_s3_client_classify(CURLE_OK, 500, &r), FT_EIO);
  assert_int_equal(r, 1);
  assert_int_equal(ckpt_s3_client_classify(CURLE_OK, 503, &r), FT_EIO);
  assert_int_equal(r, 1);
  assert_int_equal(ckpt_s3_client_classify(CURLE_COULDNT_CONNECT, 0, &r), FT_ENET);
  assert_int_equal(r, 1);
  assert_int_equal(ckpt_s3_client_classify(CURLE_OPERATION_TIMEDOUT, 0, &r), FT_ETIMEDOUT);
  assert_int_equal(r, 1);
  assert_int_equal(ckpt_s3_client_classify(CURLE_GOT_NOTHING, 0, &r), FT_ENET);
  assert_int_equal(r, 1);
  assert_int_equal(ckpt_s3_client_classify(CURLE_URL_MALFORMAT, 0, &r), FT_ECONFIG);
  assert_int_equal(r, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults_are_aws),
      cmocka_unit_test(test_endpoint_means_path_style),
      cmocka_unit_test(test_bad_values_are_config_errors),
      cmocka_unit_test(test_credentials_missing_names_where_to_put_them),
      cmocka_unit_test(test_shared_credentials_file),
      cmocka_unit_test(test_urls),
      cmocka_unit_test(test_layout_mirrors_local_tier),
      cmocka_unit_test(test_classify),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
