/* test_kv_proto.c: (being written) */
int main(void) { return 77; }
