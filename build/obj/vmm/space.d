build/obj/vmm/space.o: vmm/space.c vmm/../lib/util.h \
 include/stalloc/stalloc.h vmm/vmm-internal.h vmm/vmm.h vmm/backend.h
vmm/../lib/util.h:
include/stalloc/stalloc.h:
vmm/vmm-internal.h:
vmm/vmm.h:
vmm/backend.h:
