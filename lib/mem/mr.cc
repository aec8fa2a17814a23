#include "mr.h"
