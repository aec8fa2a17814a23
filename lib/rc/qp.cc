/* SPDX-License-Identifier: BSD-3-Clause */
#include "qp.h"

