/* SHA-256 (FIPS 180-4) through libcrypto's EVP interface. */
#include "sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sha256_init(sha256_ctx *c, pp_err *e)
{
	c->nbytes = 0;
	c->md = EVP_MD_CTX_new();
	if (c->md && EVP_DigestInit_ex(c->md, EVP_sha256(), NULL) == 1)
		return PP_OK;
	EVP_MD_CTX_free(c->md);
	c->md = NULL;
	return pp_errorf(e, PP_ERUNTIME, "libcrypto cannot set up a SHA-256 digest");
}

void sha256_update(sha256_ctx *c, const void *data, size_t n)
{
	EVP_DigestUpdate(c->md, data, n); /* cannot fail for an initialised SHA-256 context */
	c->nbytes += n;
}

void sha256_final(sha256_ctx *c, uint8_t digest[SHA256_BYTES])
{
	unsigned int len = SHA256_BYTES;
	EVP_DigestFinal_ex(c->md, digest, &len);
	sha256_discard(c);
}

void sha256_discard(sha256_ctx *c)
{
	EVP_MD_CTX_free(c->md);
	c->md = NULL;
}

void sha256_hex(const uint8_t digest[SHA256_BYTES], char hex[SHA256_HEX])
{
	static const char xd[] = "0123456789abcdef";
	for (int i = 0; i < SHA256_BYTES; i++) {
		hex[2 * i] = xd[digest[i] >> 4];
		hex[2 * i + 1] = xd[digest[i] & 15];
	}
	hex[2 * SHA256_BYTES] = '\0';
}

int sha256_file(const char *path, char hex[SHA256_HEX], int64_t *bytes, pp_err *e)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return pp_errorf(e, PP_ERUNTIME, "cannot open %s: %s", path, strerror(errno));
	enum { BUF = 1 << 20 };
	uint8_t *buf = malloc(BUF);
	if (!buf) {
		close(fd);
		return pp_errorf(e, PP_ERUNTIME, "out of memory hashing %s", path);
	}
	sha256_ctx c;
	if (sha256_init(&c, e)) {
		free(buf);
		close(fd);
		return pp_err_prefix(e, "hashing %s", path);
	}
	for (;;) {
		ssize_t n = read(fd, buf, BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = errno;
			sha256_discard(&c);
			free(buf);
			close(fd);
			return pp_errorf(e, PP_ERUNTIME, "cannot read %s: %s", path, strerror(err));
		}
		if (n == 0)
			break;
		sha256_update(&c, buf, (size_t)n);
	}
	free(buf);
	close(fd);
	uint8_t d[SHA256_BYTES];
	if (bytes)
		*bytes = (int64_t)c.nbytes;
	sha256_final(&c, d);
	sha256_hex(d, hex);
	return PP_OK;
}
