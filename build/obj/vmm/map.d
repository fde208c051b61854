build/obj/vmm/map.o: vmm/map.c vmm/../lib/util.h \
 include/stalloc/stalloc.h vmm/vmm-internal.h vmm/vmm.h vmm/backend.h
vmm/../lib/util.h:
include/stalloc/stalloc.h:
vmm/vmm-internal.h:
vmm/vmm.h:
vmm/backend.h:
