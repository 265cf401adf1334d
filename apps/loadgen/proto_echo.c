/* proto_echo.c: (being written) */
