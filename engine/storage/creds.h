/*
 * creds.h - AWS credentials found the way the AWS tools find them, held in
 * one struct that nothing else copies: the environment, the shared
 * credentials and config files, then the instance metadata service
 * (IMDSv2, with its token).  Temporary credentials are fetched again
 * before they expire.
 *
 * DESIGN: a bfs_creds is shared by every thread of a mount; creds->lock
 * guards the current set and its expiry.  bfs_creds_get copies the set out
 * under the lock into the caller's bfs_creds_set (on its stack, wiped by
 * bfs_creds_set_wipe after signing); a refresh talks to the metadata
 * service without the lock held and publishes the new set under it.  The
 * secret key goes nowhere but into a signature: bfs_creds_describe names
 * the source and the access key id, never the secret.
 */
#ifndef BFS_CREDS_H
#define BFS_CREDS_H

#include <stdint.h>
#include <time.h>

#include <stddef.h>

typedef struct bfs_creds bfs_creds;

typedef struct {
	char access_key[128];
	char secret_key[128];
	char token[4096]; /* "" without a session token */
	int anonymous;    /* 1: sign nothing (a public bucket) */
} bfs_creds_set;

typedef struct {
	int anonymous;           /* --s3-anonymous: never look for any */
	const char *profile;     /* NULL: AWS_PROFILE, else "default" */
	/* The metadata service is asked only when nothing else answered;
	 * NULL: AWS_EC2_METADATA_SERVICE_ENDPOINT, else 169.254.169.254 --
	 * unless AWS_EC2_METADATA_DISABLED=true. */
	const char *imds_endpoint;
	unsigned imds_giveup_ms; /* each metadata request's give-up; 3000 */
	unsigned refresh_s;      /* fetch again this long before expiry; 300 */
	time_t (*now)(void);     /* NULL: time(); tests move the clock */
} bfs_creds_opts;

/*
 * Find credentials.  Returns 0 (*out set; a source was found, or
 * anonymous), -ENOENT when no source has any (errmsg lists what was
 * looked at and how to give them), -EACCES when a source refused (IMDS
 * answered 401/403), -EINVAL when a file is malformed (errmsg names the
 * file and line, never a value), or -ENOMEM.
 */
int bfs_creds_open(const bfs_creds_opts *o, bfs_creds **out, char *errmsg);

/* NULL is fine.  Wipes the secrets before freeing them. */
void bfs_creds_close(bfs_creds *c);

/* The current set into *out, refreshed first when it expires within
 * refresh_s.  Returns 0, or the refresh's error (the old set is still
 * handed out while it has not expired).  Any thread. */
int bfs_creds_get(bfs_creds *c, bfs_creds_set *out, char *errmsg);

/* Zero a set copied out by bfs_creds_get. */
void bfs_creds_set_wipe(bfs_creds_set *s);

/* "environment (AKIA...)", "profile default of /root/.aws/credentials
 * (AKIA...)", "instance metadata, role R (ASIA...), expires 2026-...",
 * "anonymous": for the mount message.  Never the secret. */
void bfs_creds_describe(bfs_creds *c, char *buf, size_t n);

/* When the current set expires (0: never).  For tests and status. */
time_t bfs_creds_expiry(bfs_creds *c);

#endif
