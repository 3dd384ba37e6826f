/*
 * test_ckpt_s3_config: the S3 tier's pure parts, no server needed:
 * "s3://" URIs and the environment, the shared credentials file (inih) and
 * where the keys came from, object URLs (path and virtual-host addressing),
 * the bucket layout of keys, the one table that maps libcurl results and
 * HTTP statuses to FT_E*, SigV4 against AWS's published examples, the URI
 * encoding, and the S3 XML answers (expat).
 */
#include "ckpt_s3.h"
#include "ckpt_tier_int.h"
#include "ft_err.h"

#include <curl/curl.h>
#include <setjmp.h>
#include <stdint.h>
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
  setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
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
  assert_true(ckpt_objkey_chunk(key, sizeof key, hex) > 0);
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

static void test_cred_source_names_env_or_file_and_profile(void **st) {
  clear_env();
  set_keys();
  ckpt_s3_config c;
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_OK);
  assert_non_null(strstr(c.cred_source, "AWS_ACCESS_KEY_ID"));
  assert_non_null(strstr(c.cred_source, "environment"));
  assert_null(strstr(c.cred_source, "AKIDEXAMPLE"));
  clear_env();
  char path[] = "/tmp/test_s3_credsXXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char *text = "[team]\naws_access_key_id=TEAMKEY\naws_secret_access_key=TEAMSECRET\n";
  assert_int_equal(write(fd, text, strlen(text)), (int)strlen(text));
  close(fd);
  setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
  setenv("AWS_PROFILE", "team", 1);
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_OK);
  assert_non_null(strstr(c.cred_source, "profile 'team'"));
  assert_non_null(strstr(c.cred_source, path));
  assert_null(strstr(c.cred_source, "TEAMSECRET"));
  unlink(path);
}

/* what people write in ~/.aws/credentials: comments of both kinds, blank
 * lines, spaces and tabs around '=', "[profile x]", CRLF
 * line ends, an inline comment, several profiles, and a session token far
 * longer than inih's 200-byte lines */
static void test_credentials_file_as_people_write_it(void **st) {
  char tok[1301];
  for (int i = 0; i < 1300; i++)
    tok[i] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[i % 64];
  tok[1300] = 0;
  char text[4096];
  snprintf(text, sizeof text,
           "# AWS credentials\n"
           "; also a comment\n"
           "\n"
           "[default]\n"
           "aws_access_key_id     =   DEFKEY   \n"
           "aws_secret_access_key\t=\tDEF/SECRET+x==\n"
           "\n"
           "[profile dev]\r\n"
           "aws_access_key_id = DEVKEY ; the dev account\r\n"
           "aws_secret_access_key = DEVSECRET\r\n"
           "region = eu-west-1\r\n"
           "[sts]\n"
           "aws_access_key_id=ASIAKEY\n"
           "aws_secret_access_key=STSSECRET\n"
           "aws_session_token = %s\n"
           "[default-other]\n"
           "aws_access_key_id=WRONG\n"
           "aws_secret_access_key=WRONG\n",
           tok);
  char path[] = "/tmp/test_s3_credsXXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (int)strlen(text));
  close(fd);
  ckpt_s3_config c;
  memset(&c, 0, sizeof c);
  assert_int_equal(ckpt_s3_config_read_credentials(path, "default", &c), FT_OK);
  assert_string_equal(c.access_key, "DEFKEY");
  assert_string_equal(c.secret_key, "DEF/SECRET+x==");
  memset(&c, 0, sizeof c);
  assert_int_equal(ckpt_s3_config_read_credentials(path, "dev", &c), FT_OK);
  assert_string_equal(c.access_key, "DEVKEY");
  assert_string_equal(c.secret_key, "DEVSECRET");
  memset(&c, 0, sizeof c);
  assert_int_equal(ckpt_s3_config_read_credentials(path, "sts", &c), FT_OK);
  assert_string_equal(c.access_key, "ASIAKEY");
  assert_string_equal(c.secret_key, "STSSECRET");
  assert_string_equal(c.session_token, tok);
  memset(&c, 0, sizeof c);
  assert_int_equal(ckpt_s3_config_read_credentials(path, "nope", &c), FT_ENOENT);
  assert_non_null(strstr(ft_err_detail(), "nope"));
  unlink(path);

  /* a line that is neither a section, a value nor a comment: the file and
   * line are named, never a value */
  char bad[] = "/tmp/test_s3_credsXXXXXX";
  fd = mkstemp(bad);
  const char *bt = "[default]\naws_access_key_id=K\naws_secret_access_key=S3CR3T\nnot a pair\n";
  assert_int_equal(write(fd, bt, strlen(bt)), (int)strlen(bt));
  close(fd);
  memset(&c, 0, sizeof c);
  assert_int_equal(ckpt_s3_config_read_credentials(bad, "default", &c), FT_ECONFIG);
  assert_non_null(strstr(ft_err_detail(), bad));
  assert_non_null(strstr(ft_err_detail(), "line 4"));
  assert_null(strstr(ft_err_detail(), "S3CR3T"));
  unlink(bad);
}

/* AWS's published SigV4 examples for S3 (access key AKIAIOSFODNN7EXAMPLE,
 * 2013-05-24, us-east-1; also what botocore computes for them) */
static void test_sigv4_matches_aws_examples(void **st) {
  const char *ak = "AKIAIOSFODNN7EXAMPLE", *sk = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  const char *date = "20130524T000000Z";
  const char *empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  char auth[512];
  ckpt_s3_header get[] = {{"Host", "examplebucket.s3.amazonaws.com"},
                          {"Range", "bytes=0-9"},
                          {"x-amz-content-sha256", empty},
                          {"x-amz-date", date}};
  assert_int_equal(ckpt_s3_sigv4("GET", "/test.txt", NULL, get, 4, empty, date, "us-east-1", ak, sk,
                                 auth, sizeof auth),
                   FT_OK);
  assert_string_equal(auth, "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/"
                            "s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-"
                            "date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd910"
                            "39c6036bdb41");
  /* header order and case do not matter */
  ckpt_s3_header get2[] = {{"x-amz-date", date},
                           {"RANGE", "bytes=0-9"},
                           {"x-amz-content-sha256", empty},
                           {"host", "examplebucket.s3.amazonaws.com"}};
  char auth2[512];
  assert_int_equal(ckpt_s3_sigv4("GET", "/test.txt", NULL, get2, 4, empty, date, "us-east-1", ak,
                                 sk, auth2, sizeof auth2),
                   FT_OK);
  assert_string_equal(auth, auth2);

  const char *body_hash = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072";
  ckpt_s3_header put[] = {{"Host", "examplebucket.s3.amazonaws.com"},
                          {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                          {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
                          {"x-amz-content-sha256", body_hash},
                          {"x-amz-date", date}};
  assert_int_equal(ckpt_s3_sigv4("PUT", "/test%24file.text", NULL, put, 5, body_hash, date,
                                 "us-east-1", ak, sk, auth, sizeof auth),
                   FT_OK);
  assert_non_null(strstr(auth, "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-"
                               "storage-class, Signature=98ad721746da40c64f1a55b78f14c238d841ea13"
                               "80cd77a1b5971af0ece108bd"));

  /* the query is signed sorted, whatever order it is sent in */
  ckpt_s3_header list[] = {{"Host", "examplebucket.s3.amazonaws.com"},
                           {"x-amz-content-sha256", empty},
                           {"x-amz-date", date}};
  const char *want = "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7";
  assert_int_equal(ckpt_s3_sigv4("GET", "/", "max-keys=2&prefix=J", list, 3, empty, date,
                                 "us-east-1", ak, sk, auth, sizeof auth),
                   FT_OK);
  assert_non_null(strstr(auth, want));
  assert_int_equal(ckpt_s3_sigv4("GET", "/", "prefix=J&max-keys=2", list, 3, empty, date,
                                 "us-east-1", ak, sk, auth, sizeof auth),
                   FT_OK);
  assert_non_null(strstr(auth, want));
  /* a header that is signed but would not be sent (the old empty Expect:)
   * changes the signature: the server could never match it */
  ckpt_s3_header withexpect[] = {{"Host", "examplebucket.s3.amazonaws.com"},
                                 {"Expect", ""},
                                 {"x-amz-content-sha256", empty},
                                 {"x-amz-date", date}};
  assert_int_equal(ckpt_s3_sigv4("GET", "/", "max-keys=2&prefix=J", withexpect, 4, empty, date,
                                 "us-east-1", ak, sk, auth, sizeof auth),
                   FT_OK);
  assert_null(strstr(auth, want));
  assert_non_null(strstr(auth, "SignedHeaders=expect;host;"));
}

static void test_uri_encoding_is_sigv4s(void **st) {
  char o[256];
  assert_int_equal(ckpt_s3_uri_encode("a b+c&d=e~f_g.h-i/j%k", 1, o, sizeof o), FT_OK);
  assert_string_equal(o, "a%20b%2Bc%26d%3De~f_g.h-i/j%25k");
  assert_int_equal(ckpt_s3_uri_encode("a b/c", 0, o, sizeof o), FT_OK);
  assert_string_equal(o, "a%20b%2Fc");
  assert_int_equal(ckpt_s3_uri_encode("/\xc3\xbc//x/", 1, o, sizeof o), FT_OK);
  assert_string_equal(o, "/%C3%BC//x/");
  assert_int_equal(ckpt_s3_uri_encode("", 1, o, sizeof o), FT_OK);
  assert_string_equal(o, "");
  assert_int_equal(ckpt_s3_uri_encode("a&b&c&d", 0, o, 10), FT_EINVAL);
}

typedef struct seen {
  int n;
  char keys[8][64];
  uint64_t sizes[8];
  int64_t mt[8];
} seen;

static int seen_cb(void *ud, const char *key, uint64_t size, int64_t mt) {
  seen *s = ud;
  if (s->n == 8)
    return FT_ECANCELED;
  snprintf(s->keys[s->n], sizeof s->keys[0], "%s", key);
  s->sizes[s->n] = size;
  s->mt[s->n++] = mt;
  return FT_OK;
}

static const char *LIST1 =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
    "<Name>bkt</Name><Prefix>p/</Prefix><KeyCount>3</KeyCount><MaxKeys>3</MaxKeys>"
    "<IsTruncated>true</IsTruncated>"
    "<Contents><Key>p/a&amp;b&lt;c&gt;</Key><LastModified>2024-01-02T03:04:05.678Z</LastModified>"
    "<ETag>&quot;x&quot;</ETag><Size>12</Size><StorageClass>STANDARD</StorageClass></Contents>"
    "<Contents><Key><![CDATA[p/</Key><Key>x]]></Key><Size>0</Size></Contents>"
    "<Contents><Key>p/&#xFC;&#126;</Key><Size>5368709120</Size></Contents>"
    "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
    "</ListBucketResult>";

static void test_xml_list(void **st) {
  seen s = {0};
  int trunc = 0;
  char tok[128];
  assert_int_equal(ckpt_s3_xml_list(LIST1, strlen(LIST1), seen_cb, &s, &trunc, tok, sizeof tok),
                   FT_OK);
  assert_int_equal(s.n, 3);
  assert_string_equal(s.keys[0], "p/a&b<c>");
  assert_int_equal(s.sizes[0], 12);
  assert_int_equal(s.mt[0], 1704164645678000000LL);
  assert_string_equal(s.keys[1], "p/</Key><Key>x");
  assert_string_equal(s.keys[2], "p/\xc3\xbc~");
  assert_int_equal(s.sizes[2], 5368709120ULL);
  assert_int_equal(trunc, 1);
  assert_string_equal(tok, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");

  const char *last = "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>";
  memset(&s, 0, sizeof s);
  assert_int_equal(ckpt_s3_xml_list(last, strlen(last), seen_cb, &s, &trunc, tok, sizeof tok),
                   FT_OK);
  assert_int_equal(s.n, 0);
  assert_int_equal(trunc, 0);
  assert_string_equal(tok, "");

  /* a date an int64_t of ns cannot hold, or not a date: 0 (found by
   * fuzz_s3_xml: the product overflowed) */
  const char *dates = "<ListBucketResult><Contents><Key>a</Key><LastModified>65729-01-01T00:00:"
                      "00.000Z</LastModified></Contents><Contents><Key>b</Key><LastModified>"
                      "2262-12-31T23:59:59Z</LastModified></Contents><Contents><Key>c</Key>"
                      "<LastModified>2024-13-01T00:00:00Z</LastModified></Contents>"
                      "<Contents><Key>d</Key><LastModified>1970-01-01T00:00:01.5Z</LastModified>"
                      "</Contents></ListBucketResult>";
  memset(&s, 0, sizeof s);
  assert_int_equal(ckpt_s3_xml_list(dates, strlen(dates), seen_cb, &s, &trunc, tok, sizeof tok),
                   FT_OK);
  assert_int_equal(s.n, 4);
  assert_int_equal(s.mt[0], 0);
  assert_int_equal(s.mt[1], 0);
  assert_int_equal(s.mt[2], 0);
  assert_int_equal(s.mt[3], 1500000000LL);

  /* the callback's failure stops the walk and is returned */
  memset(&s, 0, sizeof s);
  s.n = 8;
  assert_int_equal(ckpt_s3_xml_list(LIST1, strlen(LIST1), seen_cb, &s, &trunc, tok, sizeof tok),
                   FT_ECANCELED);
  /* not a listing, not XML, truncated XML, a DTD, truncated without a token */
  const char *bad[] = {
      "<Error><Code>AccessDenied</Code></Error>",
      "HTTP/1.1 200 OK",
      "<ListBucketResult><Contents><Key>a</Key>",
      "<!DOCTYPE l [<!ENTITY e \"x\">]><ListBucketResult><Contents><Key>&e;</Key></Contents>"
      "</ListBucketResult>",
      "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&s, 0, sizeof s);
    assert_int_equal(ckpt_s3_xml_list(bad[i], strlen(bad[i]), seen_cb, &s, &trunc, tok, sizeof tok),
                     FT_EPROTO);
  }
}

static void test_xml_error_and_upload_id(void **st) {
  const char *err = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SignatureDoesNotMatch"
                    "</Code><Message>The request signature we calculated does not match &amp; "
                    "so on</Message><RequestId>1</RequestId></Error>";
  char code[64], msg[32];
  assert_int_equal(ckpt_s3_xml_error(err, strlen(err), code, sizeof code, msg, sizeof msg), FT_OK);
  assert_string_equal(code, "SignatureDoesNotMatch");
  assert_string_equal(msg, "The request signature we calcul"); /* cut, not refused */
  const char *ok = "<CompleteMultipartUploadResult><ETag>x</ETag></CompleteMultipartUploadResult>";
  assert_int_equal(ckpt_s3_xml_error(ok, strlen(ok), code, sizeof code, msg, sizeof msg),
                   FT_ENOENT);
  assert_int_equal(ckpt_s3_xml_error("<Error>", 7, code, sizeof code, msg, sizeof msg), FT_EPROTO);
  /* a broken body gives nothing half-read back (found by fuzz_s3_xml) */
  const char *broken = "<Error><Code>NoSuchKey</Code><Message>m</Message></Erzor>";
  assert_int_equal(ckpt_s3_xml_error(broken, strlen(broken), code, sizeof code, msg, sizeof msg),
                   FT_EPROTO);
  assert_string_equal(code, "");
  assert_string_equal(msg, "");

  const char *init = "<?xml version=\"1.0\"?><InitiateMultipartUploadResult xmlns=\"http://s3."
                     "amazonaws.com/doc/2006-03-01/\"><Bucket>b</Bucket><Key>k&amp;</Key><UploadId>"
                     "VXBsb2FkIElE+/=</UploadId></InitiateMultipartUploadResult>";
  char id[64];
  assert_int_equal(ckpt_s3_xml_field(init, strlen(init), "InitiateMultipartUploadResult",
                                     "UploadId", id, sizeof id),
                   FT_OK);
  assert_string_equal(id, "VXBsb2FkIElE+/=");
  assert_int_equal(ckpt_s3_xml_field(err, strlen(err), "InitiateMultipartUploadResult", "UploadId",
                                     id, sizeof id),
                   FT_ENOENT);
  assert_int_equal(
      ckpt_s3_xml_field(init, strlen(init), "InitiateMultipartUploadResult", "UploadId", id, 4),
      FT_EPROTO);
}

/* ~/.aws/config: the profile's region when no variable names one, and its
 * keys when neither the environment nor the credentials file has any */
static void test_config_file_region_and_keys(void **st) {
  clear_env();
  char path[] = "/tmp/test_s3_configXXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char *text = "[default]\nregion = eu-central-1\noutput = json\n\n"
                     "[profile dev]\nregion=ap-south-1\naws_access_key_id = CFGKEY\n"
                     "aws_secret_access_key = CFGSECRET\ns3 =\n  max_concurrent_requests = 20\n";
  assert_int_equal(write(fd, text, strlen(text)), (int)strlen(text));
  close(fd);
  setenv("AWS_CONFIG_FILE", path, 1);
  ckpt_s3_config c;
  /* [default] has a region but no keys: no credentials, both files named */
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_ECONFIG);
  assert_non_null(strstr(ft_err_detail(), "no S3 credentials"));
  assert_non_null(strstr(ft_err_detail(), "/nonexistent/credentials"));
  assert_non_null(strstr(ft_err_detail(), path));
  set_keys();
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_OK);
  assert_string_equal(c.region, "eu-central-1");
  assert_string_equal(c.endpoint, "https://s3.eu-central-1.amazonaws.com");
  setenv("AWS_REGION", "us-west-2", 1); /* a variable wins over the file */
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_OK);
  assert_string_equal(c.region, "us-west-2");
  clear_env();
  setenv("AWS_CONFIG_FILE", path, 1);
  setenv("AWS_PROFILE", "dev", 1);
  assert_int_equal(ckpt_s3_config_from_uri("s3://bkt/p", &c), FT_OK);
  assert_string_equal(c.region, "ap-south-1");
  assert_string_equal(c.access_key, "CFGKEY");
  assert_string_equal(c.secret_key, "CFGSECRET");
  assert_non_null(strstr(c.cred_source, "profile 'dev' of the config file"));
  assert_non_null(strstr(c.cred_source, "AWS_CONFIG_FILE"));
  unlink(path);
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
      cmocka_unit_test(test_cred_source_names_env_or_file_and_profile),
      cmocka_unit_test(test_credentials_file_as_people_write_it),
      cmocka_unit_test(test_config_file_region_and_keys),
      cmocka_unit_test(test_sigv4_matches_aws_examples),
      cmocka_unit_test(test_uri_encoding_is_sigv4s),
      cmocka_unit_test(test_xml_list),
      cmocka_unit_test(test_xml_error_and_upload_id),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
