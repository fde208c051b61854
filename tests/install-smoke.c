// SPDX-License-Identifier: MIT
/*
 * tests/install-smoke.c - built against an installed stalloc through
 * pkg-config by "make installcheck": the headers, the library and the .pc
 * file work together, and the loaded library matches the headers.
 */
#include <stdio.h>

#include <stalloc/stalloc.h>

int main(void)
{
	if (stalloc_version() != STALLOC_VERSION) {
		fprintf(stderr, "installed library %s does not match headers\n",
			stalloc_version_string());
		return 1;
	}
	printf("installcheck: stalloc %s\n", stalloc_version_string());
	return 0;
}
