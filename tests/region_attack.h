/* region_attack.h — try to write a table region through a read-only handle.
 *
 * A shm client receives the region as an O_RDONLY descriptor and maps it
 * PROT_READ. region_write_attempts() tries every route a hostile client has
 * to write it anyway — mprotect of its mapping, its /proc/self/map_files
 * link, write(2)/pwrite, a new
 * writable shared mapping, ftruncate, a punched hole, fchmod, and a reopen of
 * /proc/self/fd/N O_RDWR followed by all of those again — and returns how
 * many worked (0 = the region is safe). Root and the region's owner may
 * reopen and chmod it (that alone does not count); every write must still
 * fail for them. Each route that worked also
 * overwrote the region's first byte, and was named on stderr.
 */
#ifndef RKV_TEST_REGION_ATTACK_H
#define RKV_TEST_REGION_ATTACK_H

#include <stddef.h>

/* fd: the client's region descriptor; size: its mapped size; view: the
 * client's own PROT_READ mapping of it, or NULL. */
unsigned region_write_attempts(int fd, size_t size, void *view);

#endif
