build/obj/vmm/backend-host.o: vmm/backend-host.c vmm/../lib/util.h \
 include/stalloc/stalloc.h vmm/backend.h
vmm/../lib/util.h:
include/stalloc/stalloc.h:
vmm/backend.h:
